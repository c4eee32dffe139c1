"""配置进来: what the learner's machine hands the script, and what the script makes of it.

The environment is read once, by main(argv, environ), and check_config() stops a run before
any request only for mistakes that are certain: the MISTAKES table (quotes, an unexpanded
$VAR, a placeholder, `Bearer `, an address with credentials or a query, ending in
/chat/completions, or not http(s)://host), then one character at a time (whitespace,
full-width, not ASCII; a model name may be Chinese), OPENAI_TIMEOUT in (0, 3600], and a
missing key or model. Each refusal exits 2 at the Harness link, names the variable, sends
nothing and never prints the key. Each rule has near misses that must run: there is no
guessing (a 32-hex model id, an account id in an address's path).

Besides the variables, the machine brings the SDK (a learner's own openai.py can shadow it),
certificate files the SDK's HTTP library reads, and the terminal the run writes to (Ctrl-C
into a pager, the wait shown on a terminal). Proxies are in test_proxies.py.
"""

import fcntl
import io
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import termios
import threading
import time
import unicodedata
from pathlib import Path
from urllib.parse import urlsplit

import openai  # noqa: F401  (no skip: without the SDK these tests must fail, not vanish)
import pytest

import lesson_03_tool_calling_loop as lesson
from tests.provider_server import (
    ARTICLE_FINAL,
    ARTICLE_LINES,
    ARTICLE_TOOL_TURN,
    CHAT_PATH,
    ProviderServer,
    Reply,
    completion,
)
from tests.runs import environ_runner, run_in_process

SCRIPT = Path(lesson.__file__).resolve()
KEY = "sk-environment-secret-0123456789"
SELF_SIGNED = Path(__file__).resolve().parent / "tls" / "self_signed_127.0.0.1.pem"
TOOL_TURN, FINAL = ARTICLE_TOOL_TURN, ARTICLE_FINAL
HEX_32 = "023e105f4ecef8ad9ca31a8372d0c353"  # a Cloudflare account id; also a model id's shape


def is_ambient(name):
    """Read on the request path by the SDK, its HTTP library or ssl, besides main()'s dict."""
    ssl_files = ("SSL_CERT_FILE", "SSL_CERT_DIR", "SSLKEYLOGFILE", "OPENAI_")
    return name.lower().endswith("_proxy") or name.upper().startswith(ssl_files)


@pytest.fixture(autouse=True)
def plain_environment(monkeypatch):
    """Start every test from an os.environ with no proxy, certificate or OPENAI_* setting."""
    for name in [name for name in os.environ if is_ambient(name)]:
        monkeypatch.delenv(name)


@pytest.fixture(scope="module")
def shared_server():
    """One scripted server for the module's many in-process runs."""
    with ProviderServer() as server:
        yield server


class Watched:
    """The shared server as one test sees it: only the requests made since the test began."""

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
    """The shared server, answering the article's final reply: a mistake missed would run."""
    shared_server.script(FINAL)
    return Watched(shared_server)


@pytest.fixture
def env(server):
    """A complete, valid configuration for the shared server."""
    return {"OPENAI_API_KEY": KEY, "OPENAI_MODEL": "m", "OPENAI_BASE_URL": server.base_url}


def report(result):
    """The two stderr lines, as (first, second); fails if there are not exactly two."""
    lines = result.err.splitlines()
    assert len(lines) == 2 and "Traceback" not in result.everything, result.everything
    return lines[0], lines[1]


def refused(result, server, variable):
    """The run stopped at the configuration: exit 2, two lines naming `variable`, nothing
    sent, nothing on stdout. Returns the two lines."""
    assert (result.code, result.out, server.requests) == (2, "", []), result.everything
    first, second = report(result)
    assert first.startswith(f"[Harness] {variable} "), first
    assert second.startswith("建议："), second
    return first, second


def filled(value, server):
    return value.replace("{port}", str(server.port)).replace("{key}", KEY)


# ---------------------------------------------------------------------------
# The MISTAKES table: each row stops the run before any request
# ---------------------------------------------------------------------------

# (variable, value, a word of the mistake the first line names). {port}: the test server's.
ROW_CASES = [
    # quotes copied with the value (a .env file's)
    pytest.param("OPENAI_API_KEY", '"{key}"', "引号", id="quoted-key"),
    pytest.param("OPENAI_API_KEY", "'local'", "引号", id="single-quoted-short-key"),
    pytest.param("OPENAI_BASE_URL", '"http://127.0.0.1:{port}/v1"', "引号", id="quoted-url"),
    pytest.param("OPENAI_MODEL", "“gpt-4o-mini”", "引号", id="curly-quoted-model"),
    pytest.param("OPENAI_TIMEOUT", "'60'", "引号", id="quoted-timeout"),
    # an unexpanded reference (single quotes in a shell, a variable never exported)
    pytest.param("OPENAI_API_KEY", "$DEEPSEEK_API_KEY", "展开", id="dollar"),
    pytest.param("OPENAI_API_KEY", "${DEEPSEEK_API_KEY}", "展开", id="dollar-braces"),
    pytest.param("OPENAI_API_KEY", "%DEEPSEEK_API_KEY%", "展开", id="percent"),
    pytest.param("OPENAI_BASE_URL", "$OPENAI_API_BASE", "展开", id="dollar-url"),
    # a placeholder from the README or the lesson
    pytest.param("OPENAI_API_KEY", "sk-...", "占位符", id="readme-key"),
    pytest.param("OPENAI_API_KEY", "sk-proj-abc…wxyz", "占位符", id="key-cut-short-by-ellipsis"),
    pytest.param("OPENAI_API_KEY", "your-api-key", "占位符", id="your-api-key"),
    pytest.param("OPENAI_API_KEY", "<你的 key>", "占位符", id="angle-brackets"),
    pytest.param("OPENAI_BASE_URL", "https://<你的网关>/v1", "占位符", id="readme-gateway"),
    pytest.param("OPENAI_BASE_URL", "https://api.provider.example/v1", "占位符", id="example"),
    pytest.param("OPENAI_MODEL", "<model>", "占位符", id="placeholder-model"),
    # Bearer in front of the key (the SDK adds it)
    pytest.param("OPENAI_API_KEY", "Bearer {key}", "Bearer", id="bearer"),
    pytest.param("OPENAI_API_KEY", "bearer\t{key}", "Bearer", id="bearer-tab"),
    # an address with credentials or a query
    pytest.param("OPENAI_BASE_URL", "http://u:pw@127.0.0.1:{port}/v1", "查询参数", id="userinfo"),
    pytest.param("OPENAI_BASE_URL", "http://:{key}@127.0.0.1:{port}/v1", "查询参数", id="key@"),
    pytest.param(
        "OPENAI_BASE_URL", "http://127.0.0.1:{port}/v1?api-version=1", "查询参数", id="query"
    ),
    # written up to /chat/completions
    pytest.param(
        "OPENAI_BASE_URL", "http://127.0.0.1:{port}/v1/chat/completions", "/chat/", id="chat"
    ),
    pytest.param(
        "OPENAI_BASE_URL", "http://127.0.0.1:{port}/v1/chat/completions/", "/chat/", id="chat/"
    ),
    # not http(s)://host
    pytest.param("OPENAI_BASE_URL", "127.0.0.1:{port}/v1", "https://", id="no-scheme"),
    pytest.param("OPENAI_BASE_URL", "api.deepseek.com", "https://", id="host-only"),
    pytest.param("OPENAI_BASE_URL", "ftp://127.0.0.1:{port}/v1", "https://", id="ftp"),
    pytest.param("OPENAI_BASE_URL", "http:/127.0.0.1:{port}/v1", "https://", id="one-slash"),
    pytest.param("OPENAI_BASE_URL", "https://", "https://", id="no-host"),
    pytest.param("OPENAI_BASE_URL", "http:///v1", "https://", id="empty-host"),
]


@pytest.mark.parametrize(("variable", "value", "mistake"), ROW_CASES)
def test_each_row_of_the_mistakes_table_stops_the_run_before_any_request(
    capsys, env, server, variable, value, mistake
):
    value = filled(value, server)
    result = run_in_process(capsys, {**env, variable: value})
    first, _ = refused(result, server, variable)
    assert mistake in first, first
    assert KEY not in result.everything and KEY[:8] not in result.everything


def test_every_row_of_the_mistakes_table_has_a_case_here():
    """A row added to the table without a case above fails here, not silently untested."""
    cases = [param.values for param in ROW_CASES]
    uncovered = [
        pattern
        for only, pattern, _, _ in lesson.MISTAKES
        if not any(
            only in ("", variable) and re.fullmatch(pattern, value.strip(), re.S)
            for variable, value, _ in cases
        )
    ]
    assert uncovered == []


# ---------------------------------------------------------------------------
# One character at a time: whitespace, full-width, not ASCII (a model may be Chinese)
# ---------------------------------------------------------------------------

# (variable, value, the character the report points at)
CHARACTER_CASES = [
    pytest.param("OPENAI_API_KEY", "sk-cli secret-0123456789", " ", id="space-in-key"),
    pytest.param("OPENAI_API_KEY", "sk-two\nlines-0123456789", "\n", id="newline-in-key"),
    pytest.param("OPENAI_API_KEY", "sk-\u00a0nbsp-0123456789", "\u00a0", id="nbsp-in-key"),
    pytest.param("OPENAI_API_KEY", "lo cal", " ", id="space-in-short-key"),
    pytest.param("OPENAI_MODEL", "gpt 4o", " ", id="space-in-model"),
    pytest.param("OPENAI_BASE_URL", "http://127.0.0.1:{port}/v1 /x", " ", id="space-in-url"),
    pytest.param("OPENAI_TIMEOUT", "6 0", " ", id="space-in-timeout"),
    pytest.param("OPENAI_BASE_URL", "http：//127.0.0.1:{port}/v1", "：", id="full-width-colon"),
    pytest.param("OPENAI_BASE_URL", "http://127.0.0.1：{port}/v1", "：", id="full-width-port"),
    pytest.param("OPENAI_BASE_URL", "http://127。0.0.1:{port}/v1", "。", id="ideographic-dot"),
    pytest.param("OPENAI_API_KEY", "sk－environment-0123456789", "－", id="full-width-dash"),
    pytest.param("OPENAI_TIMEOUT", "６０", "６", id="full-width-digits"),
    pytest.param("OPENAI_API_KEY", "sk-environment-sécret-01234", "é", id="accent-in-key"),
    pytest.param("OPENAI_API_KEY", "sk-密钥-0123456789", "密", id="chinese-in-key"),
    pytest.param("OPENAI_BASE_URL", "http://127.0.0.1:{port}/v1/模型", "模", id="chinese-in-url"),
    pytest.param("OPENAI_TIMEOUT", "٦٠", "٦", id="arabic-indic-digits"),
    pytest.param("OPENAI_MODEL", "gpt-4o\u200b", "\u200b", id="zero-width-space-in-model"),
    pytest.param("OPENAI_MODEL", "qwen\x1b[A", "\x1b", id="arrow-key-escape-in-model"),
    pytest.param("OPENAI_API_KEY", "sk-\x00environment-0123", "\x00", id="nul-in-key"),
]


@pytest.mark.parametrize(("variable", "value", "char"), CHARACTER_CASES)
def test_a_character_that_cannot_be_sent_is_named_by_its_position(
    capsys, env, server, variable, value, char
):
    value = filled(value, server)
    result = run_in_process(capsys, {**env, variable: value})
    first, second = refused(result, server, variable)
    assert f"第 {value.strip().index(char) + 1} 个字符" in first, first
    half = unicodedata.normalize("NFKC", char)
    if half != char and half.isascii():  # full-width: the hint gives the half-width character
        assert half in second, second
    if variable == "OPENAI_API_KEY":
        assert value not in result.everything and KEY[:8] not in result.everything


@pytest.mark.parametrize(
    "value",
    ["'local'", "lo cal", "$KEY", "sk-…", "<key>", "sk-…x y"],
)
def test_a_short_key_the_mask_cannot_recognise_is_still_not_printed(capsys, env, server, value):
    # The mask knows secrets of 8 characters or more; a refused key is left out of the report.
    result = run_in_process(capsys, {**env, "OPENAI_API_KEY": value})
    refused(result, server, "OPENAI_API_KEY")
    assert value not in result.everything, result.everything


# ---------------------------------------------------------------------------
# OPENAI_TIMEOUT: seconds in (0, 3600]
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value", ["0", "0.0", "-1", "3600.01", "3601", "86400", "1e3", "60s", "inf", "nan", "sixty"]
)
def test_a_timeout_outside_0_to_3600_seconds_is_refused(capsys, env, server, value):
    refused(run_in_process(capsys, {**env, "OPENAI_TIMEOUT": value}), server, "OPENAI_TIMEOUT")


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("3600", 3600.0), ("0.001", 0.001), (".5", 0.5), ("5.", 5.0), (" 90 ", 90.0), ("", 60.0)],
)
def test_a_timeout_inside_the_bounds_is_taken_as_it_is(value, seconds):
    config = lesson.check_config(
        {"OPENAI_API_KEY": KEY, "OPENAI_MODEL": "m", "OPENAI_TIMEOUT": value}
    )
    assert config["timeout"] == seconds


@pytest.mark.parametrize("value", ["3600", "10.5"])
def test_a_run_with_a_timeout_at_or_inside_the_bound_runs(capsys, env, server, value):
    result = run_in_process(capsys, {**env, "OPENAI_TIMEOUT": value})
    assert (result.code, len(server.requests), result.err) == (0, 1, ""), result.everything


# ---------------------------------------------------------------------------
# A missing key or model
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("variable", ["OPENAI_API_KEY", "OPENAI_MODEL"])
@pytest.mark.parametrize("missing", [None, "", "  \t"], ids=["unset", "empty", "blank"])
def test_a_missing_key_or_model_exits_2_naming_it(capsys, env, server, variable, missing):
    environ = {name: value for name, value in env.items() if name != variable}
    if missing is not None:
        environ[variable] = missing
    result = run_in_process(capsys, environ)
    assert (result.code, result.out, server.requests) == (2, "", []), result.everything
    first, _ = report(result)
    assert first.startswith("[Harness] ") and variable in first, first


def test_without_a_base_url_the_default_endpoint_is_used_and_old_names_are_not_read():
    # Old or misspelt names are no longer diagnosed, nor taken in place of the right one.
    config = lesson.check_config(
        {
            "OPENAI_API_KEY": KEY,
            "OPENAI_MODEL": "m",
            "OPENAI_API_BASE": "http://127.0.0.1:9/v1",
            "OPENAI_BASEURL": "http://127.0.0.1:9/v1",
        }
    )
    assert config["base_url"] == "https://api.openai.com/v1"


# ---------------------------------------------------------------------------
# Near misses: values that look like a mistake, or like another variable, and must run
# ---------------------------------------------------------------------------

NEAR_MISSES = [
    # no guessing: a model id of 32 hex digits, or one that looks like a key, is a model
    pytest.param({"OPENAI_MODEL": HEX_32}, id="model-of-32-hex"),
    pytest.param({"OPENAI_MODEL": "sk-proj-Zq8dL2mN4pR6tV8xA1cE3gI5kM7oQ9sU"}, id="key-like-model"),
    # model names may be Chinese, full-width punctuation included (they go in the JSON body)
    pytest.param({"OPENAI_MODEL": "通义千问-plus"}, id="chinese-model"),
    pytest.param({"OPENAI_MODEL": "通义千问（plus）"}, id="full-width-parens-in-model"),
    # quotes row: a quote inside, not around
    pytest.param({"OPENAI_MODEL": "it's-7b"}, id="apostrophe-inside"),
    # unexpanded row: $ and % inside a key are characters, not a reference
    pytest.param({"OPENAI_API_KEY": "sk-ab$cd%ef%-0123456789"}, id="dollar-inside-key"),
    # placeholder row: one dot is a key's separator (Zhipu's id.secret), not "..."
    pytest.param({"OPENAI_API_KEY": "0123456789abcdef.ABCDEFGHijkl"}, id="dotted-key"),
    pytest.param({"OPENAI_MODEL": "Qwen/Qwen2.5-7B-Instruct"}, id="dots-and-slash"),
    # Bearer row: only a Bearer prefix with a space; only in the key
    pytest.param({"OPENAI_API_KEY": "sk-bearer-0123456789"}, id="bearer-inside-key"),
    pytest.param({"OPENAI_MODEL": "Bearer-7b"}, id="bearer-model"),
    # credentials row: an @ in a model is a version (LiteLLM, Vertex), not user@host
    pytest.param({"OPENAI_MODEL": "claude-3-5-sonnet-v2@20241022"}, id="at-in-model"),
    # whitespace around a value (a CRLF .env file, a pasted space) is dropped, not refused
    pytest.param({"OPENAI_API_KEY": KEY + "\r\n"}, id="key-with-crlf"),
    pytest.param({"OPENAI_API_KEY": "  " + KEY}, id="key-with-leading-spaces"),
    pytest.param({"OPENAI_MODEL": " m\t"}, id="model-with-whitespace-around"),
    pytest.param({"OPENAI_BASE_URL": " http://127.0.0.1:{port}/v1\n"}, id="url-in-whitespace"),
    pytest.param({"OPENAI_API_KEY": "local"}, id="local-key"),
    # addresses: a trailing slash, no path, an account id in the path, /chat not at the end
    pytest.param({"OPENAI_BASE_URL": "http://127.0.0.1:{port}/v1/"}, id="trailing-slash"),
    pytest.param({"OPENAI_BASE_URL": "http://127.0.0.1:{port}"}, id="no-path"),
    pytest.param(
        {"OPENAI_BASE_URL": f"http://127.0.0.1:{{port}}/v1/{HEX_32}/x/openai"},
        id="account-id-in-path",
    ),
    pytest.param({"OPENAI_BASE_URL": "http://127.0.0.1:{port}/chat/v1"}, id="chat-not-at-end"),
    # a scheme's letters are case-insensitive (RFC 3986 3.1); a notes app capitalises the first
    # (the scheme row refuses it today: a script bug, reported with this case)
    pytest.param({"OPENAI_BASE_URL": "Http://127.0.0.1:{port}/v1"}, id="capitalised-scheme"),
]


@pytest.mark.parametrize("overrides", NEAR_MISSES)
def test_a_near_miss_is_sent_as_it_is(capsys, env, server, overrides):
    overrides = {name: filled(value, server) for name, value in overrides.items()}
    result = run_in_process(capsys, {**env, **overrides})
    assert "[Harness]" not in result.err and len(server.requests) == 1, result.everything
    [sent] = server.requests
    value = {**env, **overrides}
    assert sent.body["model"] == value["OPENAI_MODEL"].strip()
    assert sent.headers["authorization"] == f"Bearer {value['OPENAI_API_KEY'].strip()}"
    path = urlsplit(value["OPENAI_BASE_URL"].strip()).path.rstrip("/") + "/chat/completions"
    assert sent.path == path
    # the test server answers only /v1/chat/completions; elsewhere its 404 is the provider's
    assert result.code == (0 if path == CHAT_PATH else 3), result.everything


@pytest.mark.parametrize(
    "url",
    [
        f"https://gateway.ai.cloudflare.com/v1/{HEX_32}/x/openai",  # AI Gateway
        f"https://api.cloudflare.com/client/v4/accounts/{HEX_32}/ai/v1",  # Workers AI
        "https://api.deepseek.com",
        "https://ark.cn-beijing.volces.com/api/v3",
        "https://open.bigmodel.cn/api/paas/v4/",
        "http://[::1]:8080/v1",
        "http://localhost:11434/v1",
    ],
)
def test_a_real_providers_address_is_accepted_as_it_is(url):
    config = lesson.check_config(
        {"OPENAI_API_KEY": KEY, "OPENAI_MODEL": "m", "OPENAI_BASE_URL": url}
    )
    assert config["base_url"] == url


@pytest.mark.parametrize(
    "model",
    [
        "gpt-4o-mini",
        "qwen2.5:7b",
        "deepseek-chat",
        "meta-llama/Llama-3.1-8B-Instruct",
        "Qwen2.5-Coder-1.5B-Instruct-Q4_K_M.gguf",
        "ft:gpt-4o-mini-2024-07-18:org:custom:9aBcD3",
        "gemini-2.5-flash",
        "any",
    ],
)
def test_real_model_names_are_taken_as_they_are(model):
    assert lesson.check_config({"OPENAI_API_KEY": KEY, "OPENAI_MODEL": model})["model"] == model


# ---------------------------------------------------------------------------
# The environment is read once, by main(): its dict, not os.environ
# ---------------------------------------------------------------------------


def test_the_run_uses_the_dict_main_is_given_not_os_environ(capsys, server, monkeypatch):
    # os.environ says otherwise about everything, and its timeout would stop the run were it
    # read; the base URL is only in the dict
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-os-environ-9876543210")
    monkeypatch.setenv("OPENAI_MODEL", "model-from-os-environ")
    monkeypatch.setenv("OPENAI_TIMEOUT", "0")
    server.script(TOOL_TURN, FINAL)
    before = dict(os.environ)
    environ = {"OPENAI_API_KEY": KEY, "OPENAI_MODEL": "m", "OPENAI_BASE_URL": server.base_url}
    result = run_in_process(capsys, environ)
    assert (result.code, result.out.splitlines(), result.err) == (0, ARTICLE_LINES, "")
    sent = [(r.headers["authorization"], r.body["model"]) for r in server.requests]
    assert sent == [(f"Bearer {KEY}", "m")] * 2
    assert dict(os.environ) == before  # and it is left as it was


@pytest.mark.parametrize("in_the_dict", [False, True], ids=["os-environ-only", "both"])
def test_org_and_project_ids_in_the_environment_are_not_sent(
    capsys, server, monkeypatch, in_the_dict
):
    # The SDK reads OPENAI_ORG_ID and OPENAI_PROJECT_ID from os.environ itself; a leftover
    # from OpenAI must not travel to a third party. A real run has them in both places.
    leftovers = {"OPENAI_ORG_ID": "org-leftover", "OPENAI_PROJECT_ID": "proj_leftover"}
    for name, value in leftovers.items():
        monkeypatch.setenv(name, value)
    environ = {"OPENAI_API_KEY": KEY, "OPENAI_MODEL": "m", "OPENAI_BASE_URL": server.base_url}
    result = run_in_process(capsys, {**environ, **(leftovers if in_the_dict else {})})
    assert result.code == 0, result.everything
    [sent] = server.requests
    assert not {"openai-organization", "openai-project"} & set(sent.headers), sent.headers
    assert [v for v in sent.headers.values() if "leftover" in v] == []
    assert sent.headers["authorization"] == f"Bearer {KEY}"


# ---------------------------------------------------------------------------
# The SDK itself: shadowed by a learner's file, or unable to build a client from this machine
# ---------------------------------------------------------------------------


def child_environment(**variables):
    env = {name: value for name, value in os.environ.items() if not is_ambient(name)}
    env.pop("PYTHONUNBUFFERED", None)  # a learner's stdout into a pipe is block-buffered
    return {**env, "OPENAI_API_KEY": KEY, "OPENAI_MODEL": "m", **variables}


def free_closed_port_url():
    """http://127.0.0.1:<port>/v1 where nothing listens (the port is free again at once)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}/v1"


@pytest.mark.parametrize("shadow", ["openai.py", "openai/__init__.py"])
def test_a_learners_own_openai_next_to_the_script_is_named(tmp_path, shadow):
    shutil.copy(SCRIPT, tmp_path / SCRIPT.name)
    path = tmp_path / shadow
    path.parent.mkdir(exist_ok=True)
    path.write_text("print('my first experiment with the API')\n")
    done = subprocess.run(
        [sys.executable, str(tmp_path / SCRIPT.name)],
        env=child_environment(OPENAI_BASE_URL=free_closed_port_url()),
        cwd=SCRIPT.parent,
        capture_output=True,
        text=True,
        timeout=60,
    )
    first, second = done.stderr.splitlines()
    assert done.returncode == 2
    assert first.startswith("[Harness] ") and str(path) in first  # the file to rename
    assert second.startswith("建议：") and "openai.py" in second


@pytest.mark.parametrize(
    ("variable", "what"),
    [("SSL_CERT_FILE", "missing"), ("SSL_CERT_FILE", "junk"), ("SSLKEYLOGFILE", "missing")],
)
def test_a_certificate_file_the_library_cannot_load_is_a_configuration_error(
    provider, capsys, monkeypatch, tmp_path, variable, what
):
    # The HTTP library reads these from os.environ when the SDK builds its client, even for
    # an http:// endpoint: no request can be sent, and the library's own words are quoted.
    path = tmp_path / "no-such-dir" / "file.pem"
    if what == "junk":
        path = tmp_path / "stale-conda-ca.pem"
        path.write_text("not a certificate\n")
    # With a valid SSL_CERT_FILE beside, httpx2 too builds its context through
    # ssl.create_default_context, which reads SSLKEYLOGFILE; httpx always does.
    valid = {"SSL_CERT_FILE": str(SELF_SIGNED)} if variable != "SSL_CERT_FILE" else {}
    result = environ_runner(provider, capsys, monkeypatch, KEY)(**valid, **{variable: str(path)})
    assert (result.code, result.out, provider.requests) == (2, "", []), result.everything
    first, _ = report(result)
    assert first.startswith("[Harness] "), first
    if variable == "SSLKEYLOGFILE":
        assert str(path) in first, first


# ---------------------------------------------------------------------------
# The terminal: Ctrl-C into a pager, the wait shown on a terminal, one pipe for both streams
# ---------------------------------------------------------------------------


def queued(fd):
    return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]


def pipe_is_stalled(fd):
    """True once the pipe holds most of its capacity and nobody takes from it: the writer is
    blocked in write(), like a program piped into a pager that is not scrolling."""
    before = queued(fd)
    time.sleep(0.2)
    return before == queued(fd) >= fcntl.fcntl(fd, 1032) // 2  # 1032: F_GETPIPE_SZ


def wait_until(condition, seconds=30):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def interrupted_run(provider, args, *, interrupts):
    """Run the script in its own process group with stdout into a pipe nobody reads (a pager
    that is not scrolling). `interrupts` is a list of conditions; after each is met, SIGINT
    goes to the whole group, as Ctrl-C in a terminal does. Returns (exit code, stdout, stderr)."""
    child = subprocess.Popen(
        [sys.executable, str(SCRIPT), *args],
        env=child_environment(OPENAI_BASE_URL=provider.base_url),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        for condition in interrupts:
            wait_until(lambda c=condition: c(child))
            os.killpg(child.pid, signal.SIGINT)
        wait_until(lambda: child.poll() is not None)  # without waiting for its reader
        out = child.stdout.read().decode(errors="replace")
        return child.returncode, out, child.stderr.read().decode()
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()


@pytest.mark.skipif(sys.platform != "linux", reason="pipe capacity via fcntl is Linux-only")
def test_ctrl_c_while_the_answer_is_written_into_a_stalled_pager(provider):
    provider.script(completion(content="三千七百二十。" * 40_000))  # far more than a pipe holds
    code, out, err = interrupted_run(
        provider, [], interrupts=[lambda child: pipe_is_stalled(child.stdout.fileno())]
    )
    assert (code, err) == (130, "已中断（Ctrl-C）\n")
    assert out.startswith("step 1: finish_reason=stop\nAgent> 三千七百二十。")


@pytest.mark.skipif(sys.platform != "linux", reason="pipe capacity via fcntl is Linux-only")
def test_a_second_ctrl_c_while_the_history_prints_is_still_one_line(provider):
    provider.script(Reply(json=FINAL, delay=30))  # the first Ctrl-C lands during the request
    question = ["请认真算。" * 5_000] * 6  # a history bigger than the pipe (each argument < 128 KB)
    code, out, err = interrupted_run(
        provider,
        ["--show-messages", *question],
        interrupts=[
            lambda child: provider.requests,
            lambda child: pipe_is_stalled(child.stdout.fileno()),
        ],
    )
    assert (code, err) == (130, "已中断（Ctrl-C）\n")
    assert out.startswith('[\n  {\n    "role": "user"')  # it was printing the history


def render(terminal_bytes):
    """What stays visible on the screen after carriage returns let later text overwrite it."""
    rows = []
    for line in terminal_bytes.decode().replace("\r\n", "\n").split("\n"):
        cells, column = [], 0
        for char in line:
            if char == "\r":
                column = 0
                continue
            cells[column : column + 1] = [char]
            column += 1
        rows.append("".join(cells).rstrip())
    return "\n".join(rows).strip()


def read_all(fd, into):
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # the terminal's other side closed
            return
        if not chunk:
            return
        into.extend(chunk)


def test_while_waiting_a_terminal_shows_progress_and_keeps_no_trace(provider, monkeypatch):
    # In-process: stderr is a real terminal (a pty), stdout is not, as in `python3 script > log`
    provider.script(Reply(json=TOOL_TURN, delay=1.6), FINAL)
    leader, follower = os.openpty()
    shown = bytearray()
    reader = threading.Thread(target=lambda: read_all(leader, shown), daemon=True)
    reader.start()
    answer = io.StringIO()
    try:
        with open(follower, "w", encoding="utf-8") as terminal, monkeypatch.context() as patch:
            patch.setattr(sys, "stdout", answer)
            patch.setattr(sys, "stderr", terminal)
            code = lesson.main([], child_environment(OPENAI_BASE_URL=provider.base_url))
    finally:
        reader.join(10)
        os.close(leader)
    assert (code, answer.getvalue().splitlines()) == (0, ARTICLE_LINES)  # byte for byte
    assert "等待响应" in bytes(shown).decode(), bytes(shown)
    assert render(bytes(shown)) == ""


def test_in_one_pipe_the_report_comes_after_the_steps_and_nothing_else_is_added(provider):
    # The first reply is slow: a terminal would show the wait; a pipe must get none of it.
    bad = Reply(status=400, json={"error": {"message": "bad second turn"}})
    provider.script(Reply(json=TOOL_TURN, delay=1.6), bad)
    done = subprocess.run(  # like `python3 lesson_03_tool_calling_loop.py 2>&1 | tee log`
        [sys.executable, str(SCRIPT)],
        env=child_environment(OPENAI_BASE_URL=provider.base_url),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=60,
    )
    lines = done.stdout.splitlines()
    assert done.returncode == 3 and len(lines) == 4, done.stdout
    assert lines[:2] == ARTICLE_LINES[:2]
    assert lines[2].startswith("[Provider] step 2: HTTP 400：bad second turn")
    assert lines[3].startswith("最后一个成功事件：call_1 的 Tool Result 已写入历史")
