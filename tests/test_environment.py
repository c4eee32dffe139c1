"""配置进来: what the learner's machine hands the script, and what the script makes of it.

The environment is read once, by main(argv, environ), and check_config() stops a run before
any request only for mistakes that are certain: a certificate variable pointing at a missing
path, an old or misspelt variable name set while the right one is not, a missing key or model,
quotes around a value, a placeholder or unexpanded variable anywhere in it ($NAME, ${NAME},
%NAME%, {NAME}, <...>, ..., your-...), a character that cannot be sent (whitespace, not
printable, not ASCII; a model name may be Chinese), an address that is not http(s)://host or
ends in /chat/completions, and a timeout that is not a number of seconds. Each refusal exits 2
at the Harness link, names the variable, sends nothing and never prints the key. Each rule has
near misses that must run: there is no guessing (a 32-hex model id, an account id in an
address's path, a percent-escape in an address).

Besides the variables, the machine brings the SDK (a learner's own openai.py can shadow it),
certificate files the SDK's HTTP library reads, and the terminal the run writes to (Ctrl-C
into a pager, one pipe for both streams). Proxies are in test_proxies.py.
"""

import fcntl
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import termios
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
# Certain mistakes in a value: each stops the run before any request
# ---------------------------------------------------------------------------

# (variable, value, a word of the mistake the first line names, or None: the variable named is
# enough). {port}: the test server's. An address is aimed at the test server where it can be:
# were the mistake missed, the request would reach it.
MISTAKE_CASES = [
    # quotes copied with the value (a .env file's)
    pytest.param("OPENAI_API_KEY", '"{key}"', "引号", id="quoted-key"),
    pytest.param("OPENAI_API_KEY", "'local'", "引号", id="single-quoted-short-key"),
    pytest.param("OPENAI_BASE_URL", '"http://127.0.0.1:{port}/v1"', "引号", id="quoted-url"),
    pytest.param("OPENAI_MODEL", "“gpt-4o-mini”", "引号", id="curly-quoted-model"),
    pytest.param("OPENAI_TIMEOUT", "'60'", "引号", id="quoted-timeout"),
    # written up to /chat/completions
    pytest.param(
        "OPENAI_BASE_URL", "http://127.0.0.1:{port}/v1/chat/completions", "/chat/", id="chat"
    ),
    pytest.param(
        "OPENAI_BASE_URL", "http://127.0.0.1:{port}/v1/chat/completions/", "/chat/", id="chat/"
    ),
    # not http(s)://host (the report's words for it are the script's to choose)
    pytest.param("OPENAI_BASE_URL", "127.0.0.1:{port}/v1", None, id="no-scheme"),
    pytest.param("OPENAI_BASE_URL", "api.deepseek.com", None, id="host-only"),
    pytest.param("OPENAI_BASE_URL", "ftp://127.0.0.1:{port}/v1", None, id="ftp"),
    pytest.param("OPENAI_BASE_URL", "http:/127.0.0.1:{port}/v1", None, id="one-slash"),
    pytest.param("OPENAI_BASE_URL", "https://", None, id="no-host"),
    pytest.param("OPENAI_BASE_URL", "http:///v1", None, id="empty-host"),
]


@pytest.mark.parametrize(("variable", "value", "mistake"), MISTAKE_CASES)
def test_a_certain_mistake_in_a_value_stops_the_run_before_any_request(
    capsys, env, server, variable, value, mistake
):
    value = filled(value, server)
    result = run_in_process(capsys, {**env, variable: value})
    first, _ = refused(result, server, variable)
    assert mistake is None or mistake in first, first
    assert KEY not in result.everything and KEY[:8] not in result.everything


# Issue 35: a value copied from a document with its placeholder still in it, or a reference
# the shell never expanded (single quotes, a variable never exported), anywhere in the value.
PLACEHOLDER_CASES = [
    # Cloudflare's documented address, with the account id left as the docs write it
    pytest.param(
        "OPENAI_BASE_URL",
        "https://gateway.ai.cloudflare.com/v1/{ACCOUNT_ID}/ai/v1",
        id="cloudflare-{NAME}",
    ),
    pytest.param("OPENAI_BASE_URL", "https://x/${CLOUDFLARE_ACCOUNT_ID}/v1", id="${NAME}-in-url"),
    # the same, aimed at the test server: were they missed, the request would reach it
    pytest.param(
        "OPENAI_BASE_URL", "http://127.0.0.1:{port}/v1/{ACCOUNT_ID}/ai/v1", id="{NAME}-here"
    ),
    pytest.param(
        "OPENAI_BASE_URL", "http://127.0.0.1:{port}/${CLOUDFLARE_ACCOUNT_ID}/v1", id="${NAME}-here"
    ),
    pytest.param("OPENAI_BASE_URL", "http://127.0.0.1:{port}/%GATEWAY_ID%/v1", id="%NAME%-here"),
    pytest.param("OPENAI_BASE_URL", "http://127.0.0.1:{port}/<你的网关>/v1", id="<...>-here"),
    pytest.param("OPENAI_BASE_URL", "https://<你的网关>/v1", id="readme-gateway"),
    pytest.param("OPENAI_BASE_URL", "$OPENAI_API_BASE", id="$NAME-as-url"),
    # a key: $NAME, ${NAME}, %NAME%, {NAME}, the README's sk-..., a key cut short by …
    pytest.param("OPENAI_API_KEY", "$DEEPSEEK_API_KEY", id="$NAME"),
    pytest.param("OPENAI_API_KEY", "${DEEPSEEK_API_KEY}", id="${NAME}"),
    pytest.param("OPENAI_API_KEY", "%DEEPSEEK_API_KEY%", id="%NAME%"),
    pytest.param("OPENAI_API_KEY", "{API_TOKEN}", id="{API_TOKEN}"),
    pytest.param("OPENAI_API_KEY", "sk-...", id="sk-..."),
    pytest.param("OPENAI_API_KEY", "sk-proj-abc…wxyz", id="key-cut-short-by-ellipsis"),
    pytest.param("OPENAI_API_KEY", "your-api-key", id="your-api-key"),
    pytest.param("OPENAI_API_KEY", "<你的 key>", id="<你的 key>"),
    pytest.param("OPENAI_API_KEY", "sk-proj-$KEY_SUFFIX", id="$NAME-inside-a-key"),
    # a model
    pytest.param("OPENAI_MODEL", "<model>", id="<model>"),
    pytest.param("OPENAI_MODEL", "qwen2.5:${SIZE}", id="${NAME}-inside-a-model"),
    pytest.param("OPENAI_MODEL", "your_model_name", id="your_model"),
]


@pytest.mark.parametrize(("variable", "value"), PLACEHOLDER_CASES)
def test_a_placeholder_or_unexpanded_variable_anywhere_in_a_value_is_a_certain_mistake(
    capsys, env, server, variable, value
):
    result = run_in_process(capsys, {**env, variable: filled(value, server)})
    first, _ = refused(result, server, variable)
    assert "占位符" in first, first
    assert KEY not in result.everything and KEY[:8] not in result.everything


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
# OPENAI_TIMEOUT: a number of seconds
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["-1", "86400", "1e3", "60s", "inf", "nan", "sixty", "1,5"])
def test_a_timeout_that_is_not_a_number_of_seconds_is_refused(capsys, env, server, value):
    refused(run_in_process(capsys, {**env, "OPENAI_TIMEOUT": value}), server, "OPENAI_TIMEOUT")


@pytest.mark.parametrize("value", ["0", "0.0"])
def test_a_timeout_of_zero_seconds_is_refused(capsys, env, server, value):
    # No request can be answered in 0 seconds. Sent, the connection fails at once and the run
    # is reported as "本机 ... 上没有服务在应答" while the server is running: a wrong diagnosis.
    refused(run_in_process(capsys, {**env, "OPENAI_TIMEOUT": value}), server, "OPENAI_TIMEOUT")


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("3600", 3600.0), ("0.001", 0.001), (" 90 ", 90.0), ("9999", 9999.0), ("", 60.0)],
)
def test_a_timeout_in_seconds_is_taken_as_it_is(value, seconds):
    config = lesson.check_config(
        {"OPENAI_API_KEY": KEY, "OPENAI_MODEL": "m", "OPENAI_TIMEOUT": value}
    )
    assert config["OPENAI_TIMEOUT"] == seconds


@pytest.mark.parametrize("value", ["3600", "10.5"])
def test_a_run_with_a_timeout_in_seconds_runs(capsys, env, server, value):
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


def test_without_a_base_url_the_default_endpoint_is_used():
    config = lesson.check_config({"OPENAI_API_KEY": KEY, "OPENAI_MODEL": "m"})
    assert config["OPENAI_BASE_URL"] == "https://api.openai.com/v1"


# ---------------------------------------------------------------------------
# Old or misspelt names (issue 35): the script does not read them, and says so
# ---------------------------------------------------------------------------

# (the old name, the name the script reads). An old tutorial's OPENAI_API_BASE (openai 0.x),
# other tools' spellings.
OLD_NAMES = [
    ("OPENAI_API_BASE", "OPENAI_BASE_URL"),
    ("OPENAI_BASE", "OPENAI_BASE_URL"),
    ("OPENAI_API_BASE_URL", "OPENAI_BASE_URL"),
    ("OPENAI_KEY", "OPENAI_API_KEY"),
    ("OPENAI_MODEL_NAME", "OPENAI_MODEL"),
]


@pytest.mark.parametrize(("old", "right"), OLD_NAMES)
@pytest.mark.parametrize("right_is", ["unset", "empty"])
def test_an_old_name_set_while_the_right_one_is_not_is_named_with_the_right_one(
    capsys, env, server, old, right, right_is
):
    # The old name holds what the right one should (the test server's address, the key, the
    # model): exit 2 with both names, before any request
    environ = {name: value for name, value in env.items() if name != right}
    if right_is == "empty":
        environ[right] = ""
    environ[old] = env[right]
    result = run_in_process(capsys, environ)
    assert (result.code, result.out, server.requests) == (2, "", []), result.everything
    first, second = report(result)
    assert first.startswith("[Harness] ") and old in first and right in first, first
    assert second.startswith("建议：") and right in second, second
    assert KEY not in result.everything and KEY[:8] not in result.everything


@pytest.mark.parametrize(("old", "right"), OLD_NAMES)
def test_an_old_name_beside_the_right_one_is_left_alone(capsys, env, server, old, right):
    # Both set (a shell profile that exports both): the right one is used, the old one ignored
    elsewhere = {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "OPENAI_API_KEY": "sk-old-9876543210"}
    result = run_in_process(capsys, {**env, old: elsewhere.get(right, "old-model")})
    assert (result.code, result.err) == (0, ""), result.everything
    [sent] = server.requests
    assert sent.body["model"] == "m" and sent.headers["authorization"] == f"Bearer {KEY}"


def test_an_old_name_set_to_nothing_is_ignored():
    # OPENAI_API_BASE= (empty) is not a setting: the default endpoint is used
    environ = {"OPENAI_API_KEY": KEY, "OPENAI_MODEL": "m", "OPENAI_API_BASE": ""}
    assert lesson.check_config(environ)["OPENAI_BASE_URL"] == "https://api.openai.com/v1"


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
    # quotes: one inside, not around
    pytest.param({"OPENAI_MODEL": "it's-7b"}, id="apostrophe-inside"),
    # placeholders: a $ or % not followed by a name is a character, not a reference; one dot is
    # a key's separator (Zhipu's id.secret), not "..."; "your" not followed by - or _
    pytest.param({"OPENAI_API_KEY": "sk-ab$9cd%-0123456789"}, id="dollar-and-percent-in-key"),
    pytest.param({"OPENAI_API_KEY": "0123456789abcdef.ABCDEFGHijkl"}, id="dotted-key"),
    pytest.param({"OPENAI_MODEL": "Qwen/Qwen2.5-7B-Instruct"}, id="dots-and-slash"),
    pytest.param({"OPENAI_MODEL": "yourmodel-7b"}, id="your-without-a-dash"),
    # an @ in a model is a version (LiteLLM, Vertex)
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
    # a percent-escape in the path is not %NAME%: an escaped slash, a space, an escaped
    # non-ASCII segment (how an address carries the 模型 the per-character check refuses raw)
    pytest.param({"OPENAI_BASE_URL": "http://127.0.0.1:{port}/v1%2Fx"}, id="escaped-slash"),
    pytest.param({"OPENAI_BASE_URL": "http://127.0.0.1:{port}/a%20b/v1"}, id="escaped-space"),
    pytest.param(
        {"OPENAI_BASE_URL": "http://127.0.0.1:{port}/v1/%E6%A8%A1%E5%9E%8B"},
        id="escaped-utf8-segment",
    ),
    # a scheme's letters are case-insensitive (RFC 3986 3.1); a notes app capitalises the first
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
        f"https://gateway.ai.cloudflare.com/v1/{HEX_32}/my-gateway/compat",  # its unified API
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
    assert config["OPENAI_BASE_URL"] == url


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
        "@cf/meta/llama-3.1-8b-instruct",  # Cloudflare Workers AI
        "accounts/fireworks/models/llama-v3p1-8b-instruct",
        "通义千问-plus",
        HEX_32,
    ],
)
def test_real_model_names_are_taken_as_they_are(model):
    config = lesson.check_config({"OPENAI_API_KEY": KEY, "OPENAI_MODEL": model})
    assert config["OPENAI_MODEL"] == model


# ---------------------------------------------------------------------------
# The environment is read once, by main(): its dict, not os.environ
# ---------------------------------------------------------------------------


def test_the_run_uses_the_dict_main_is_given_not_os_environ(capsys, server, monkeypatch):
    # os.environ says otherwise about everything, and its timeout would stop the run were it
    # read; the base URL is only in the dict
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-os-environ-9876543210")
    monkeypatch.setenv("OPENAI_MODEL", "model-from-os-environ")
    monkeypatch.setenv("OPENAI_TIMEOUT", "soon")
    server.script(TOOL_TURN, FINAL)
    before = dict(os.environ)
    environ = {"OPENAI_API_KEY": KEY, "OPENAI_MODEL": "m", "OPENAI_BASE_URL": server.base_url}
    result = run_in_process(capsys, environ)
    assert (result.code, result.out.splitlines(), result.err) == (0, ARTICLE_LINES, "")
    sent = [(r.headers["authorization"], r.body["model"]) for r in server.requests]
    assert sent == [(f"Bearer {KEY}", "m")] * 2
    assert dict(os.environ) == before  # and it is left as it was


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


@pytest.mark.parametrize("variable", ["SSL_CERT_FILE", "SSL_CERT_DIR"])
def test_a_certificate_variable_pointing_at_a_missing_path_is_named(
    provider, capsys, monkeypatch, tmp_path, variable
):
    # A removed conda environment leaves these behind. They go into os.environ, where the
    # SDK's HTTP library reads them: were the check missing, it would fail there or go on.
    runner = environ_runner(provider, capsys, monkeypatch, KEY)
    result = runner(**{variable: str(tmp_path / "removed-env" / "cacert.pem")})
    assert (result.code, result.out, provider.requests) == (2, "", []), result.everything
    first, second = report(result)
    assert first.startswith(f"[Harness] {variable} "), first
    assert second.startswith("建议：") and variable in second, second


@pytest.mark.parametrize(
    ("variable", "what"),
    [("SSL_CERT_FILE", "junk"), ("SSL_CERT_FILE", "folder"), ("SSLKEYLOGFILE", "missing")],
)
def test_a_file_the_http_library_cannot_load_is_a_configuration_error(
    provider, capsys, monkeypatch, tmp_path, variable, what
):
    # The HTTP library reads these from os.environ when the SDK builds its client, even for
    # an http:// endpoint: no request can be sent, and the library's own words are quoted.
    # A path that exists but holds no certificate (a stale file, a folder); a key log in a
    # missing folder.
    path = {
        "junk": tmp_path / "stale-conda-ca.pem",
        "folder": tmp_path,
        "missing": tmp_path / "no-such-dir" / "keys.log",
    }[what]
    if what == "junk":
        path.write_text("not a certificate\n")
    # With a valid SSL_CERT_FILE beside, httpx2 too builds its context through
    # ssl.create_default_context, which reads SSLKEYLOGFILE; httpx always does.
    valid = {"SSL_CERT_FILE": str(SELF_SIGNED)} if variable != "SSL_CERT_FILE" else {}
    result = environ_runner(provider, capsys, monkeypatch, KEY)(**valid, **{variable: str(path)})
    assert (result.code, result.out, provider.requests) == (2, "", []), result.everything
    first, second = report(result)
    assert first.startswith("[Harness] SDK "), first  # the SDK could not build its client
    if variable == "SSL_CERT_FILE":
        assert variable in second, second  # the advice names the variable to fix
    else:
        assert str(path) in first, first  # the file it could not open


# ---------------------------------------------------------------------------
# The terminal: Ctrl-C into a pager, one pipe for both streams
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


def test_in_one_pipe_the_report_comes_after_the_steps_and_nothing_else_is_added(provider):
    bad = Reply(status=400, json={"error": {"message": "bad second turn"}})
    provider.script(TOOL_TURN, bad)
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
