"""The command line, run in-process through main(): arguments, help, and the configuration
checks that stop a run with exit 2 before any request is sent."""

import re
import sys

import pytest

import lesson_03_tool_calling_loop as lesson
from tests.provider_server import ProviderServer, Reply, completion
from tests.runs import Run

KEY = "sk-cli-secret-0123456789"


@pytest.fixture
def run(capsys):
    """Call main(args, env) in-process and return its exit code and what it printed."""

    def runner(args, env):
        code = lesson.main(list(args), dict(env))
        captured = capsys.readouterr()
        return Run(code, captured.out, captured.err)

    return runner


@pytest.fixture(scope="module")
def shared_server():
    """One scripted server for the module: stopping one after every test costs ~50 ms."""
    with ProviderServer() as server:
        yield server


class Watched:
    """The shared server, seen from one test: `requests` are those made since it began."""

    def __init__(self, server):
        self.server, self.seen = server, len(server.requests)
        self.port, self.base_url = server.port, server.base_url

    @property
    def requests(self):
        return self.server.requests[self.seen :]

    def script(self, *replies):
        self.server.script(*replies)


@pytest.fixture
def server(shared_server):
    """The shared server with nothing scripted: any request gets HTTP 500."""
    shared_server.script()
    return Watched(shared_server)


@pytest.fixture
def env(server):
    """A complete, valid configuration pointing at the shared server."""
    return {"OPENAI_API_KEY": KEY, "OPENAI_MODEL": "test-model", "OPENAI_BASE_URL": server.base_url}


# ---------------------------------------------------------------------------
# Missing and bad configuration: exit 2, one clear two-line report, no request
# ---------------------------------------------------------------------------

MISSING = [
    pytest.param({}, "OPENAI_API_KEY", id="nothing-set"),
    pytest.param({"OPENAI_MODEL": "m"}, "OPENAI_API_KEY", id="no-key"),
    pytest.param({"OPENAI_API_KEY": "   ", "OPENAI_MODEL": "m"}, "OPENAI_API_KEY", id="blank-key"),
    pytest.param({"OPENAI_API_KEY": KEY}, "OPENAI_MODEL", id="no-model"),
    pytest.param({"OPENAI_API_KEY": KEY, "OPENAI_MODEL": "   "}, "OPENAI_MODEL", id="blank-model"),
]


@pytest.mark.parametrize(("variables", "missing"), MISSING)
def test_a_missing_variable_exits_2_naming_it_in_two_stderr_lines(run, server, variables, missing):
    result = run([], {"OPENAI_BASE_URL": server.base_url, **variables})
    assert (result.code, len(result.err_lines), result.out) == (2, 2, ""), result.err
    assert result.err_lines[0].startswith(f"[Harness] {missing} "), result.err
    assert server.requests == []


# (variable overrides, the variable the report must name); {port} is the server's port
BAD_CONFIGURATION = [
    pytest.param({"OPENAI_BASE_URL": "localhost:{port}/v1"}, "OPENAI_BASE_URL", id="no-scheme"),
    pytest.param(
        {"OPENAI_BASE_URL": "http://127.0.0.1:{port}/v1/chat/completions"},
        "OPENAI_BASE_URL",
        id="full-endpoint-path",
    ),
    # the script has no port or bracket check: these reach the SDK's HTTP library (or urlsplit)
    pytest.param({"OPENAI_BASE_URL": "http://127.0.0.1:abc/v1"}, "OPENAI_BASE_URL", id="port-abc"),
    pytest.param(
        {"OPENAI_BASE_URL": "http://127.0.0.1:99999/v1"}, "OPENAI_BASE_URL", id="port-99999"
    ),
    pytest.param({"OPENAI_BASE_URL": "http://[::1/v1"}, "OPENAI_BASE_URL", id="unclosed-ipv6"),
    pytest.param({"OPENAI_BASE_URL": "ftp://127.0.0.1:{port}/v1"}, "OPENAI_BASE_URL", id="ftp"),
    *(
        pytest.param({"OPENAI_TIMEOUT": value}, "OPENAI_TIMEOUT", id=f"timeout-{value}")
        for value in ["soon", "nan", "inf", "-1", "1e308", "86400"]
    ),
    pytest.param({"OPENAI_API_KEY": KEY + "“"}, "OPENAI_API_KEY", id="non-ascii-key"),
    pytest.param({"OPENAI_API_KEY": "sk-cli secret-0123456789"}, "OPENAI_API_KEY", id="key-space"),
    pytest.param({"OPENAI_MODEL": "gpt-\udcff"}, "OPENAI_MODEL", id="model-lone-surrogate"),
]


def configured(env, server, overrides):
    """env with the overrides applied: {port} becomes the server's port, None removes."""
    variables = {**env, **overrides}
    return {
        name: value.replace("{port}", str(server.port))
        for name, value in variables.items()
        if value is not None
    }


@pytest.mark.parametrize(("overrides", "variable"), BAD_CONFIGURATION)
def test_bad_configuration_exits_2_naming_the_variable(run, env, server, overrides, variable):
    variables = configured(env, server, overrides)
    result = run([], variables)
    first = result.err_lines[0] if result.err_lines else ""
    # The script's own checks name the variable; when the SDK refuses the address while it
    # builds its client, the report shows the address itself ("端点 ...")
    named = variable in first or variables[variable] in first
    assert (result.code, first.startswith("[Harness] "), named) == (2, True, True), result.err


def aims_at_the_server(param):
    """True when, were the check missing, the SDK would send its request to the test server:
    only then does "no request reached the server" say anything. A non-ASCII key or a lone
    surrogate in the model name could not be encoded by the SDK either."""
    url = param.values[0].get("OPENAI_BASE_URL", "http://127.0.0.1:{port}/v1")
    aimed = url.startswith("http://127.0.0.1:{port}/")
    return aimed and param.id not in {"non-ascii-key", "model-lone-surrogate"}


@pytest.mark.parametrize(
    ("overrides", "variable"), [param for param in BAD_CONFIGURATION if aims_at_the_server(param)]
)
def test_bad_configuration_sends_no_request(run, env, server, overrides, variable):
    run([], configured(env, server, overrides))
    assert server.requests == []


@pytest.mark.parametrize(("overrides", "variable"), BAD_CONFIGURATION)
def test_bad_configuration_is_reported_in_two_stderr_lines_only(
    run, env, server, overrides, variable
):
    result = run([], configured(env, server, overrides))
    assert (len(result.err_lines), result.out) == (2, ""), result.err


# A URL's password is a secret like the key. Some of these addresses are refused before any
# request, the others are sent and the server's error brings the report that shows the
# endpoint: neither may show the password. The passwords are not KEY_LIKE (only the URL makes
# them secret) and each value is one a learner can type: an unescaped @ in the password, a
# stray space, a missing scheme or slash.
@pytest.mark.parametrize(
    ("template", "password"),
    [
        pytest.param("http://user:{password}@{host}/v1", "pass", id="plain"),
        pytest.param("http://user:{password}@{host}/v1", "alpha:omega9", id="with-colon"),
        pytest.param("http://user:{password}@{host}/v1", "alpha@omega9", id="with-at-sign"),
        pytest.param("http://user:{password}@{host}/v1", "alpha omega9", id="with-space"),
        pytest.param("http://user:{password}@{host}/v1", "alpha\nomega9", id="with-newline"),
        pytest.param("http:/user:{password}@{host}/v1", "secret9", id="one-slash"),
        pytest.param("user:{password}@{host}/v1", "secret9", id="no-scheme"),
        pytest.param("user:{password}@{host}/v1", "alpha@omega9", id="no-scheme-with-at-sign"),
    ],
)
def test_a_password_in_the_base_url_is_never_echoed(run, env, server, password, template):
    server.script(Reply(status=500, json={"error": {"message": "upstream failed"}}))
    url = template.format(password=password, host=f"127.0.0.1:{server.port}")
    result = run([], {**env, "OPENAI_BASE_URL": url})
    assert result.code in (2, 3) and "Traceback" not in result.err, result.err
    # Word by word: a report may turn the whitespace into something else and still leak
    pieces = [part for part in re.split(r"[@:/\s]+", password) if part]
    leaked = [part for part in pieces if part in result.out + result.err]
    assert leaked == [], result.err
    # the address is either refused, or sent and shown in the report with its password masked
    assert result.code == 2 or f"端点 http://***@127.0.0.1:{server.port}/v1" in result.err


@pytest.mark.parametrize(
    "overrides",
    [
        pytest.param({"OPENAI_MODEL": None}, id="no-model"),
        pytest.param({"OPENAI_MODEL": "   "}, id="blank-model"),
        *(pytest.param(param.values[0], id=param.id) for param in BAD_CONFIGURATION),
    ],
)
def test_the_api_key_never_appears_in_a_configuration_report(run, env, server, overrides):
    variables = configured(env, server, overrides)
    secret = variables["OPENAI_API_KEY"].strip()
    result = run([], variables)
    assert (result.code, len(secret) >= 8) == (2, True)  # a report with a real key to leak
    assert secret not in result.out + result.err


# A value that fails a check is described by the mistake that produces it, found by one check
# per variable (the same check for every variable), and the report says what to do. Only
# certain mistakes are named: which variable a value "looks like" is never guessed.
# (variable, value, words the first line must contain, words the hint must contain)
NAMED_MISTAKES = [
    pytest.param("OPENAI_API_KEY", f'"{KEY}"', ["引号"], ["引号"], id="quoted-key"),
    pytest.param(
        "OPENAI_BASE_URL", '"http://127.0.0.1:{port}/v1"', ["引号"], ["引号"], id="quoted-url"
    ),
    pytest.param(
        "OPENAI_BASE_URL",
        "'http://127.0.0.1:{port}/v1'",
        ["引号"],
        ["引号"],
        id="single-quoted-url",
    ),
    pytest.param("OPENAI_MODEL", "“gpt-4o-mini”", ["引号"], ["引号"], id="curly-quoted-model"),
    # a full-width character: its position, and the half-width one to type instead
    pytest.param(
        "OPENAI_BASE_URL",
        "http：//127.0.0.1:{port}/v1",
        ["第 5 个字符", "："],
        [":"],
        id="full-width-colon",
    ),
    pytest.param(
        "OPENAI_BASE_URL",
        "http://127.0.0.1：{port}/v1",
        ["第 17 个字符", "："],
        [":"],
        id="full-width-colon-before-port",
    ),
    pytest.param("OPENAI_TIMEOUT", "６０", ["第 1 个字符"], ["6"], id="full-width-digits"),
    pytest.param("OPENAI_API_KEY", "sk-cli secret-0123456789", ["第 7 个字符"], [], id="space"),
    # the key pasted as the address: not an address (a certain mistake), and still never shown
    pytest.param("OPENAI_BASE_URL", KEY, [], [], id="key-as-url"),
    # the SDK writes "Bearer " itself
    pytest.param("OPENAI_API_KEY", "Bearer " + KEY, ["Bearer"], [], id="bearer-prefix"),
]


@pytest.mark.parametrize(("variable", "value", "named", "advised"), NAMED_MISTAKES)
def test_a_common_mistake_is_named_as_the_mistake(
    run, env, server, variable, value, named, advised
):
    result = run([], {**env, variable: value.replace("{port}", str(server.port))})
    first, second = [*result.err_lines, "", ""][:2]
    assert (result.code, len(result.err_lines), server.requests) == (2, 2, []), result.err
    assert first.startswith(f"[Harness] {variable} 不可用"), first
    assert all(word in first for word in named), first
    assert second.startswith("建议：") and all(word in second for word in advised), second
    assert KEY not in result.err  # the key itself is never echoed, whichever variable holds it


def test_a_swapped_key_and_url_never_print_the_key(run, server):
    result = run(
        [], {"OPENAI_API_KEY": server.base_url, "OPENAI_BASE_URL": KEY, "OPENAI_MODEL": "m"}
    )
    assert result.code == 2 and KEY not in result.err and KEY[:8] not in result.err
    assert result.err.startswith("[Harness] OPENAI_BASE_URL "), result.err
    assert server.requests == []


def test_an_address_with_an_account_id_in_its_path_is_not_taken_for_a_key(run, env, server):
    # Cloudflare Workers AI: https://api.cloudflare.com/client/v4/accounts/{account_id}/ai/v1
    # (developers.cloudflare.com/workers-ai/configuration/open-ai-compatibility, no date); the id
    # is 32 hex digits. A valid address: the request is sent, whatever the server then answers.
    # (The scripted server answers only /v1/chat/completions: here it says 404, exit 3.)
    path = "/client/v4/accounts/023e105f4ecef8ad9ca31a8372d0c353/ai/v1"
    result = run([], {**env, "OPENAI_BASE_URL": f"http://127.0.0.1:{server.port}{path}"})
    sent = [request.path for request in server.requests]
    assert (result.code != 2, sent) == (True, [f"{path}/chat/completions"]), result.err


# 配置进来: the environment is read once, and each certain mistake a learner makes with it is
# named before anything is sent. (overrides, the names the report must contain, the mistake)
# "{base}" is the shared server's base URL, None removes the variable.
ENVIRONMENT_MISTAKES = [
    # swapped: only the certain half is named (an address may be a model's name on a gateway)
    pytest.param(
        {"OPENAI_MODEL": "https://api.deepseek.com/v1", "OPENAI_BASE_URL": "deepseek-chat"},
        ["OPENAI_BASE_URL"],
        "",
        id="model-and-base-url-swapped",
    ),
    *(
        pytest.param({"OPENAI_API_KEY": value}, ["OPENAI_API_KEY"], "展开", id=f"unexpanded-{how}")
        for how, value in [
            ("dollar", "$DEEPSEEK_API_KEY"),
            ("braces", "${DEEPSEEK_API_KEY}"),
            ("percent", "%DEEPSEEK_API_KEY%"),
        ]
    ),
    pytest.param({"OPENAI_API_KEY": "sk-..."}, ["OPENAI_API_KEY"], "占位符", id="readme-key"),
    pytest.param(
        {"OPENAI_BASE_URL": "https://<你的网关>/v1"},
        ["OPENAI_BASE_URL"],
        "占位符",
        id="readme-gateway",
    ),
    pytest.param(
        {"OPENAI_API_KEY": None, "openai_api_key": KEY}, ["OPENAI_API_KEY"], "", id="no-key"
    ),
]


def with_base(env, server, overrides):
    variables = {**env, **overrides}
    return {
        name: value.replace("{base}", server.base_url)
        for name, value in variables.items()
        if value is not None
    }


@pytest.mark.parametrize(("overrides", "names", "mistake"), ENVIRONMENT_MISTAKES)
def test_an_environment_mistake_exits_2_naming_it_before_any_request(
    run, env, server, overrides, names, mistake
):
    server.script(completion(content="42"))  # were the mistake missed, a request would get this
    result = run([], with_base(env, server, overrides))
    assert (result.code, len(result.err_lines), result.out, server.requests) == (2, 2, "", [])
    first, second = result.err_lines
    assert first.startswith("[Harness] ") and second.startswith("建议："), result.err
    assert [name for name in names if name not in result.err] == [], result.err
    assert mistake in result.err and KEY not in result.err


@pytest.mark.parametrize(
    "overrides",
    [
        pytest.param({"OPENAI_MODEL": "Qwen/Qwen2.5-7B-Instruct"}, id="model-with-dots-and-slash"),
        pytest.param({"OPENAI_MODEL": "deepseek-v4-flash", "OPENAI_TIMEOUT": "60"}, id="timeout"),
        pytest.param({"OPENAI_MODEL": "qwen2.5:7b", "OPENAI_API_KEY": "local"}, id="local-key"),
        pytest.param({"OPENAI_MODEL": "m", "OPENAI_TIMEOUT": "2.5"}, id="timeout-with-a-dot"),
        # a gateway alias: the model goes in the JSON body, not in a header, so it may be Chinese
        pytest.param({"OPENAI_MODEL": "通义千问-plus"}, id="non-ascii-model-alias"),
        # LiteLLM / Vertex names carry a version after @: a model, not user:password@host
        pytest.param({"OPENAI_MODEL": "claude-3-5-sonnet-v2@20241022"}, id="model-with-at"),
        # looks like a key, is a model (a fine-tune's id): nothing is guessed before a request
        pytest.param({"OPENAI_MODEL": "0123456789abcdef0123456789abcdef"}, id="32-hex-model"),
        pytest.param({"OPENAI_MODEL": "https://api.deepseek.com/v1"}, id="address-as-model"),
    ],
)
def test_a_near_miss_is_not_reported(run, env, server, overrides):
    server.script(completion(content="42"))
    result = run([], {**env, **overrides})
    sent = [request.body["model"] for request in server.requests]
    assert (result.code, sent, result.err) == (0, [overrides["OPENAI_MODEL"]], ""), result.err


def test_main_reads_only_its_environ_argument(run, env, server, closed_port_url, monkeypatch):
    # os.environ points elsewhere: another key, another model, an endpoint that refuses
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-os-environ-9876543210")
    monkeypatch.setenv("OPENAI_MODEL", "model-from-os-environ")
    monkeypatch.setenv("OPENAI_BASE_URL", closed_port_url)
    server.script(completion(content="42"))
    result = run([], env)
    assert (result.code, result.out.splitlines()[-1:]) == (0, ["Agent> 42"]), result.err
    [request] = server.requests
    assert (request.body["model"], request.headers["authorization"]) == (
        "test-model",
        f"Bearer {KEY}",
    )


# ---------------------------------------------------------------------------
# Arguments
# ---------------------------------------------------------------------------

USAGE_ERRORS = [
    pytest.param(["--selfcheck"], id="--selfcheck"),
    pytest.param(["-self-check"], id="-self-check"),
    pytest.param(["-help"], id="-help"),
    pytest.param(["-x"], id="-x"),
    pytest.param(["--show-messages=1"], id="--show-messages=1"),
    pytest.param(["6 乘以 7", "--bogus"], id="unknown-option-after-the-question"),
    # a Chinese input method types -- as —— or －－: an option all the same, and a wrong one
    pytest.param(["——show-messages"], id="——show-messages"),
    pytest.param(["6 乘以 7", "－－demo"], id="－－demo-after-the-question"),
]


@pytest.mark.parametrize("args", USAGE_ERRORS)
def test_a_usage_error_exits_2_with_the_usage_line(run, env, args):
    result = run(args, env)
    assert (result.code, "参数错误" in result.err, "用法" in result.err) == (2, True, True), (
        result.err
    )


@pytest.mark.parametrize("args", USAGE_ERRORS)
def test_a_usage_error_prints_two_stderr_lines_and_sends_nothing(run, env, server, args):
    server.script(completion(content="42"))  # were the option taken for a question, it would run
    result = run(args, env)
    assert (len(result.err_lines), result.out, server.requests) == (2, "", []), result.err


@pytest.mark.parametrize(
    ("typed", "meant"),
    [
        pytest.param("——show-messages", "--show-messages", id="em-dashes"),
        pytest.param("－－demo", "--demo", id="full-width-hyphen-minus"),
        pytest.param("—self-check", "--self-check", id="one-em-dash"),
        pytest.param("–demo", "--demo", id="one-en-dash"),
        pytest.param("——help", "--help", id="help-is-not-shown-either"),
    ],
)
def test_an_option_typed_with_full_width_dashes_is_named_as_the_option_it_looks_like(
    run, env, server, typed, meant
):
    # Neither run as the option (the self-check, the demo, the help would print on stdout) nor
    # sent as a question: the report names what was typed and the option it stands for
    server.script(completion(content="42"))
    result = run([typed], env)
    assert (result.code, result.out, server.requests) == (2, "", []), result.everything
    first = result.err_lines[0]
    assert typed in first and meant in first.replace(typed, ""), first


@pytest.mark.parametrize(
    ("args", "question"),
    [
        pytest.param([], "帮我算一下 248 乘以 15", id="default"),
        pytest.param(["帮我算一下", "6", "乘以", "7"], "帮我算一下 6 乘以 7", id="words-joined"),
        pytest.param(["-7 乘以 6"], "-7 乘以 6", id="leading-minus-number"),
        pytest.param(["-7", "乘以", "6"], "-7 乘以 6", id="leading-minus-word"),
        # a dash is an option only when a letter follows it
        pytest.param(["6 乘以 7", "——快点"], "6 乘以 7 ——快点", id="full-width-dashes-then-han"),
        pytest.param(["——", "6 乘以 7"], "—— 6 乘以 7", id="full-width-dashes-alone"),
    ],
)
def test_the_question_words_become_the_user_message(run, env, server, args, question):
    server.script(completion(content="42"))
    result = run(args, env)
    sent = [request.body["messages"] for request in server.requests]
    assert (result.code, sent) == (0, [[{"role": "user", "content": question}]]), result.err


# ---------------------------------------------------------------------------
# Help
# ---------------------------------------------------------------------------

HELP_FLAGS = pytest.mark.parametrize("flag", ["--help", "-h"])


@HELP_FLAGS
def test_help_exits_0_on_stdout_without_any_configuration(run, flag):
    result = run([flag], {})
    assert (result.code, result.err, result.out.startswith("用法")) == (0, "", True)


@HELP_FLAGS
@pytest.mark.parametrize(
    "variable", ["OPENAI_API_KEY", "OPENAI_MODEL", "OPENAI_BASE_URL", "OPENAI_TIMEOUT"]
)
def test_help_names_every_variable_the_script_reads(run, flag, variable):
    assert variable in run([flag], {}).out


@HELP_FLAGS
def test_help_lists_every_exit_code(run, flag):
    out = run([flag], {}).out
    section = out.split("退出码", 1)[1]
    listed = {int(code) for code in re.findall(r"(?:^|[：；\s])(\d+) ", section)}
    assert listed == {0, 1, 2, 3, 130}, section


@HELP_FLAGS
def test_help_points_at_the_readme_for_the_rest(run, flag):
    # The examples and each provider's settings live in README.md, next to the script
    assert "README" in run([flag], {}).out


# ---------------------------------------------------------------------------
# openai not installed
# ---------------------------------------------------------------------------


@pytest.fixture
def without_openai(monkeypatch):
    monkeypatch.setitem(sys.modules, "openai", None)  # `import openai` now raises ImportError


def test_without_openai_exits_2_naming_the_sdk(run, env, server, without_openai):
    result = run([], env)
    first, second = [*result.err_lines, "", ""][:2]
    assert (result.code, len(result.err_lines), result.out) == (2, 2, ""), result.err
    assert first.startswith("[Harness] openai SDK "), first
    assert "pip install" in second and "Traceback" not in result.err, second
    assert server.requests == []


def test_a_model_name_with_an_at_sign_is_shown_not_masked(run, env, server):
    model = "claude-3-5-sonnet-v2@20241022"
    server.script(completion(content=f"我是 {model}，3720"))
    result = run([], {**env, "OPENAI_MODEL": model})
    assert (result.code, result.out.splitlines()[-1]) == (0, f"Agent> 我是 {model}，3720")


def test_a_key_with_a_byte_that_is_not_utf8_cannot_crash_even_the_self_check(run):
    # os.environ holds a byte that is not UTF-8 as a lone surrogate (surrogateescape)
    for key in ["sk-abcdefgh\udcffijklmnop", "sk-\udce4" + "x" * 20]:
        result = run(["--self-check"], {"OPENAI_API_KEY": key})
        assert (result.code, result.out.splitlines()[-1]) == (0, "self-check passed"), result.err
    proxy = {"HTTPS_PROXY": "http://learner:p\udce4ss-word-123@proxy.example:8080"}
    assert run(["--demo"], proxy).code == 0
