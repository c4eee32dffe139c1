"""Banner 文字出去, the one mask: no output shows the API key, wherever it was put.

The rule, as `secret_mask(environment)` applies it to everything MaskedOutput writes:

- Secret: OPENAI_API_KEY; a KEY_LIKE run (sk-…, gsk_…, xai-…, AIza…, a JWT, 32 or more letters
  and digits, a UUID) in any environment value.
- Its forms: as it is, with / written \\/ (JSON may; PHP's json_encode does), %-escaped
  (quote(safe="")), in any letter case.
- Each form is masked from its first 8 characters on, with the run of key characters
  ([\\w\\-./+=%\\\\]) after them: a copy cut short with `...` or `…` after 8 or more
  characters is masked too.
- The short-key rule: a form shorter than 8 characters is never masked (a key like `local` would
  otherwise eat ordinary words); a short key's escaped form can reach 8 characters
  (`ab/cdef` -> `ab%2Fcdef`): that form is masked, the key as it is is not. Text that shares
  fewer than 8 leading characters with every form is left as it is.
- Any URL's `user:password@` is shown as `***@`; terminal control characters are escaped (ESC is
  shown as \\u001b).

Part one tests the rule directly, part two drives main() in-process down every output (the
report, the step lines and the answer, --show-messages, a harness-bug traceback, the usage
error, the self-check), part three is a property over random keys in a provider's error body.

Dropped with issue 28 (their tests went with them): a key JSON-escaped twice, whitespace folded
into one line, the ensure_ascii=False JSON form, a URL's whole `user:password` as the secret.
Dropped with the rebuild of part 3 (5f90ce6): JSON-escaped forms other than \\/ (a key with "
or \\ in its first 8 characters), a URL's password as a secret outside its URL, the refused
response under --show-messages.
"""

import contextlib
import io
import json
import os
import re
import string
from urllib.parse import quote

import openai  # noqa: F401  (no skip: without the SDK these tests must fail, not vanish)
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

import lesson_03_tool_calling_loop as lesson
from tests.provider_server import ProviderServer, Reply, completion, tool_call
from tests.runs import run_in_process

KEY = "sk-sweep-5f4e3d2c1b0a9988776655"  # KEY_LIKE: a secret in whichever variable holds it
ODD = "gw/7Hq+Zr2=Lm9p\\Xv4Tn.K_e-y"  # its \/-escaped and %-escaped forms differ from it
EARLY = "ab/cdefgh-0123456789"  # its \/-escaped form differs within the first 8 characters
PLAIN_PASSWORD = "hunter2pass-plain"  # not KEY_LIKE: a secret only as a URL's password
KEEP = 15  # characters of a secret left before a cut "…"


def slashed(key):
    """The key as JSON may write it: every / as \\/."""
    return key.replace("/", "\\/")


def forms(key):
    return {"as it is": key, "\\/-escaped": slashed(key), "%-escaped": pct(key)}


def pct(key, lower_hex=False):
    escaped = quote(key, safe="")
    return re.sub("%..", lambda match: match[0].lower(), escaped) if lower_hex else escaped


def runs_of_8(text):
    return {text[i : i + 8] for i in range(len(text) - 7)}


def shown_forms(text, key):
    """The forms of `key` of which 8 characters in a row are in `text`, in any letter case."""
    seen = runs_of_8(text.lower())
    return [name for name, form in forms(key).items() if runs_of_8(form.lower()) & seen]


def assert_not_shown(result, key):
    assert shown_forms(result.everything, key) == [], result.everything


def mask_of(**environment):
    return lesson.secret_mask(environment)


@pytest.fixture(autouse=True)
def no_ambient_proxy(monkeypatch):
    """The SDK's HTTP library reads proxies from os.environ: none but the test's own."""
    for name in [name for name in os.environ if name.lower().endswith("_proxy")]:
        monkeypatch.delenv(name)


# ---------------------------------------------------------------------------
# Part one: the rule itself, secret_mask(environment) on a text
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "text", "shown"),
    [
        (ODD, f"key={ODD};", "key=***;"),
        (ODD, f'{{"key": "{slashed(ODD)}"}}', '{"key": "***"}'),
        (ODD, f"GET /v1?key={pct(ODD)}&x=1", "GET /v1?key=***&x=1"),
        (ODD, f"GET /v1?key={pct(ODD, lower_hex=True)}&x=1", "GET /v1?key=***&x=1"),
        (ODD, f"KEY {ODD.upper()} key {ODD.lower()}", "KEY *** key ***"),
        (
            KEY,
            f"Incorrect API key provided: {KEY[:12]}...{KEY[-4:]}",
            "Incorrect API key provided: ***",  # the dots and the end are key characters
        ),
        (KEY, f"id={KEY[:8]}…", "id=***…"),
        (KEY, f"Invalid API key: {KEY[:KEEP].upper()}…", "Invalid API key: ***…"),
        (ODD, f"said {slashed(ODD)[:20]}…", "said ***…"),
        (ODD, f"said {pct(ODD)[:9]}...", "said ***"),  # . is one of the key's characters
        (EARLY, f"said {slashed(EARLY)} end", "said *** end"),
        (EARLY, f"said {pct(EARLY)} end", "said *** end"),
    ],
    ids=[
        "raw",
        "slash-escaped",
        "%-upper",
        "%-lower",
        "upper-and-lower-cased",
        "cut-with-three-dots",
        "cut-after-8",
        "cut-upper-cased",
        "slash-escaped-cut",
        "%-cut",
        "slash-escape-in-the-first-8",
        "%-escape-in-the-first-8",
    ],
)
def test_the_mask_hides_each_form_of_the_key(key, text, shown):
    assert mask_of(OPENAI_API_KEY=key)(text) == shown


@pytest.mark.parametrize(
    ("key", "how", "cut"),
    [
        ("sk-abcdefgh/wxyz0123456789", "as it is", 22),
        ("sk-abcdefgh+wxyz0123456789", "%-escaped", 26),
        ("A" * 32 + "/wxyz0123456789", "%-escaped", 45),
    ],
)
def test_nothing_of_a_cut_key_is_left_after_a_key_like_run_inside_it(key, how, cut):
    """The key holds a KEY_LIKE run of its own (a second secret): masking it must not leave the
    rest of the key standing."""
    sent = forms(key)[how][:cut] + "…"
    shown = mask_of(OPENAI_API_KEY=key)(f"key {sent} end")
    assert shown == "key ***… end"


KEY_SHAPES = {
    "sk": "sk-proj-Ab12Cd34Ef56Gh78",
    "gsk": "gsk_Ab12Cd34Ef56Gh78Ij90",
    "xai": "xai-Ab12Cd34Ef56Gh78Ij90",
    "AIza": "AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4",
    "JWT": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJl",
    "32-alnum": "0123456789abcdef0123456789abcdef",
    "UUID": "0f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a",
}
PASTED_INTO = {
    "OPENAI_MODEL": "{}",
    "OPENAI_BASE_URL": "https://gw.example/{}/v1",
    "OPENAI_ORG_ID": "{}",
    "MY_NOTES": "token={};",
}


@pytest.mark.parametrize("name", PASTED_INTO)
@pytest.mark.parametrize("shape", KEY_SHAPES)
def test_a_key_like_run_in_any_variable_is_masked(shape, name):
    token = KEY_SHAPES[shape]
    mask = mask_of(OPENAI_API_KEY="local", **{name: PASTED_INTO[name].format(token)})
    assert mask(f"模型 {token} 不存在；{token[:10]}…") == "模型 *** 不存在；***…"


def test_any_urls_user_and_password_are_masked():
    mask = mask_of(OPENAI_API_KEY="local")  # not configured anywhere: the shape is enough
    assert (
        mask("see https://someone:pw@mirror.example/v1 now")
        == "see https://***@mirror.example/v1 now"
    )
    assert mask(f"http://learner:{KEY}@127.0.0.1:1/v1") == "http://***@127.0.0.1:1/v1"
    proxy = f"socks5h://learner:{PLAIN_PASSWORD}@127.0.0.1:1080"  # not KEY_LIKE: only the shape
    assert mask(f"proxy {proxy} refused") == "proxy socks5h://***@127.0.0.1:1080 refused"


def test_terminal_control_characters_are_escaped_newlines_and_tabs_are_not():
    # a CRLF ends a line as a newline does (harmless on a terminal); a lone CR rewrites the line
    text = "a\x1b[2Jb\x07c\x9bd\u202ee\rf\tg\nh\r\ni"
    assert mask_of()(text) == "a\\u001b[2Jb\\u0007c\\u009bd\\u202ee\\u000df\tg\nh\r\ni"


def test_near_misses_stay_visible():
    environment = {
        "OPENAI_API_KEY": KEY,
        "OPENAI_MODEL": "deepseek-chat",
        "OPENAI_BASE_URL": "https://api.deepseek.com/v1",
    }
    text = (
        "step 1: multiply call_id=call_1 result=3720；248 乘以 15 等于 3720；12345678 sweeping；"
        f"模型 deepseek-chat；端点 https://api.deepseek.com/v1；{KEY[:7]}_other {KEY[:7].upper()}"
    )
    assert lesson.secret_mask(environment)(text) == text


def test_eight_shared_leading_characters_are_masked_seven_are_not():
    mask = mask_of(OPENAI_API_KEY=KEY)
    assert mask(f"{KEY[:7]}Xother") == f"{KEY[:7]}Xother"
    assert mask(f"{KEY[:8]} other") == "*** other"


def test_a_short_key_is_not_masked_a_long_enough_form_of_it_is():
    assert mask_of(OPENAI_API_KEY="local")("local 服务，key=local") == "local 服务，key=local"
    mask = mask_of(OPENAI_API_KEY="ab/cdef")  # 7 characters; \/-escaped, 8; %-escaped, 9
    assert mask("raw ab/cdef escaped ab%2Fcdef, ab\\/cdef") == "raw ab/cdef escaped ***, ***"


# ---------------------------------------------------------------------------
# Part two: every output, through main()
# ---------------------------------------------------------------------------


def echo(secret):
    """What a provider or model echoes: the secret as it is, upper-cased, cut short."""
    return f"{secret} upper={secret.upper()} cut={secret[:KEEP]}…"


def key_error(secret):
    """A 401 echoing the secret, and once more across the report's 200-character clip."""
    said = f"Incorrect API key provided: {echo(secret)}. Again: "
    said += "." * (199 - KEEP - len(said)) + secret
    body = {"error": {"message": said, "type": "invalid_request_error", "code": "invalid_api_key"}}
    return Reply(status=401, json=body)


def tool_turn(secret):
    """The model repeats the secret as an argument key, and in a call id the step line's
    80-character clip cuts."""
    call_id = "call_" + "x" * (74 - KEEP) + secret
    calls = [
        tool_call("call_1", "multiply", json.dumps({"a": 248, "b": 15, secret: 1})),
        tool_call(call_id, "multiply", '{"a":6,"b":7}'),
    ]
    return completion(tool_calls=calls, finish_reason="tool_calls")


def replies(path, secret):
    return {
        "http-401": [key_error(secret)],
        "success": [tool_turn(secret), completion(content=f"3720。{echo(secret)}")],
        "bug": [tool_turn(secret)],
    }[path]


PLACEMENTS = {  # (the secret, the variables given the provider's URL and the refusing host)
    "OPENAI_API_KEY": (KEY, lambda url, dead: {"OPENAI_API_KEY": KEY, "OPENAI_BASE_URL": url}),
    "OPENAI_MODEL": (KEY, lambda url, dead: {"OPENAI_MODEL": KEY, "OPENAI_BASE_URL": url}),
    "OPENAI_ORG_ID": (KEY, lambda url, dead: {"OPENAI_ORG_ID": KEY, "OPENAI_BASE_URL": url}),
    "HTTP_PROXY": (  # the provider is the forward proxy; the endpoint refuses connections
        KEY,
        lambda url, dead: {
            "HTTP_PROXY": f"http://learner:{KEY}@{url.removeprefix('http://')[:-3]}",
            "OPENAI_BASE_URL": f"http://{dead}/v1",
        },
    ),
}


def check_path(path, result):
    """The run went down `path` (else the test would prove nothing), and showed the secret
    masked there."""
    first = result.err_lines[0] if result.err else ""
    assert result.code == {"http-401": 3, "success": 0, "bug": 1}[path], result
    if path == "http-401":  # the provider's words quoted, masked, cut by the clip
        assert first.startswith("[Provider] step 1: HTTP 401：") and "***…" in first, first
    elif path == "success":  # the step lines, the answer and the history
        assert result.err == "" and "Agent> 3720。*** upper=*** cut=***…" in result.out
        assert "call_id=call_xxx" in result.out and '"content": "3720。***' in result.out
    else:  # the harness bug's traceback, after the history
        assert first.startswith("[Harness] "), first
        assert "Traceback (most recent call last)" in result.err
        assert "RuntimeError: bug with *** upper=*** cut=***…" in result.err
        assert "***" in result.out


@pytest.mark.parametrize("path", ["http-401", "success", "bug"])
@pytest.mark.parametrize("placement", PLACEMENTS)
def test_a_secret_in_any_variable_is_shown_on_no_exit_path(
    placement, path, provider, closed_port_url, monkeypatch, capsys
):
    secret, variables = PLACEMENTS[placement]
    dead = closed_port_url.removeprefix("http://").removesuffix("/v1")
    env = {"OPENAI_API_KEY": "local", "OPENAI_MODEL": "m"}
    env.update(variables(provider.base_url, dead))
    for name in [name for name in env if name.endswith("_PROXY")]:
        monkeypatch.setenv(name, env[name])  # where the SDK's HTTP library reads it
    provider.script(*replies(path, secret))
    if path == "bug":

        def broken_router(call):
            raise RuntimeError(f"bug with {echo(secret)}")

        monkeypatch.setattr(lesson, "execute_tool", broken_router)

    result = run_in_process(capsys, env, "--show-messages")

    assert_not_shown(result, secret)
    check_path(path, result)
    assert len(provider.requests) == len(replies(path, secret))
    if placement == "OPENAI_MODEL" and path == "http-401":
        assert "，模型 ***" in result.err_lines[0]
    if placement.endswith("_PROXY"):  # absolute form: it did go through the proxy
        assert all(r.path.startswith(f"http://{dead}/v1/") for r in provider.requests)


@pytest.mark.parametrize(
    ("variables", "names"),
    [
        ({"OPENAI_API_KEY": f"Bearer {KEY}"}, "OPENAI_API_KEY"),  # as an HTTP header is written
        ({"OPENAI_API_KEY": f"{KEY}…"}, "OPENAI_API_KEY"),  # a placeholder's mark
        ({"OPENAI_API_KEY": None, "OPENAI_KEY": KEY}, "OPENAI_KEY"),  # an old name
        ({"OPENAI_MODEL": f'"{KEY}"'}, "OPENAI_MODEL"),
        ({"OPENAI_TIMEOUT": KEY}, "OPENAI_TIMEOUT"),
        ({"OPENAI_BASE_URL": KEY}, "OPENAI_BASE_URL"),
    ],
    ids=["key-with-bearer", "key-cut-short", "old-name", "quoted-model", "timeout", "url"],
)
def test_a_configuration_error_does_not_show_the_key(variables, names, capsys):
    env = {"OPENAI_API_KEY": "local", "OPENAI_MODEL": "m", "OPENAI_BASE_URL": "https://h.test/v1"}
    env = {name: value for name, value in {**env, **variables}.items() if value is not None}
    result = run_in_process(capsys, env)
    assert result.code == 2 and result.err.startswith("[Harness] "), result
    assert names in result.err_lines[0], result.err
    assert_not_shown(result, KEY)
    assert "***" not in result.everything  # the value is not echoed, not even masked


def test_a_proxy_password_quoted_by_the_sdk_is_masked(monkeypatch, capsys):
    # The HTTP library refuses the proxy's scheme while the SDK builds its client, quoting it
    proxy = f"ftp://learner:{PLAIN_PASSWORD}@127.0.0.1:1"
    monkeypatch.setenv("HTTPS_PROXY", proxy)  # where the SDK's HTTP library reads it
    env = {"OPENAI_API_KEY": "local", "OPENAI_MODEL": "m", "OPENAI_BASE_URL": "https://h.test/v1"}
    result = run_in_process(capsys, {**env, "HTTPS_PROXY": proxy})
    assert result.code == 2 and result.err.startswith("[Harness] SDK "), result
    assert "ftp://***@127.0.0.1:1" in result.err_lines[0], result.err
    assert PLAIN_PASSWORD not in result.everything


@pytest.mark.parametrize(
    ("where", "shown"),
    [
        ("path", "http://127.0.0.1:{port}/***"),  # the run of key characters takes /v1 along
        ("query", "http://127.0.0.1:{port}/v1?key=***"),
        ("password", "http://***@127.0.0.1:{port}/v1"),
    ],
)
def test_a_secret_in_the_base_url_is_masked_where_the_report_shows_the_endpoint(
    provider, capsys, where, shown
):
    # No guessing: each of these addresses is sent; the report that follows shows it masked
    url = {
        "path": provider.base_url.replace("/v1", f"/{KEY}/v1"),
        "query": f"{provider.base_url}?key={KEY}",
        "password": provider.base_url.replace("//", f"//learner:{PLAIN_PASSWORD}@"),
    }[where]
    provider.script(Reply(status=401, json={"error": {"message": "unauthorized"}}))
    result = run_in_process(
        capsys, {"OPENAI_API_KEY": "local", "OPENAI_MODEL": "m", "OPENAI_BASE_URL": url}
    )
    assert result.code == 3 and result.err.startswith("[Provider] step 1: HTTP "), result
    assert f"端点 {shown.format(port=provider.port)}，" in result.err_lines[0], result.err
    assert_not_shown(result, KEY)
    assert PLAIN_PASSWORD not in result.everything


def test_a_key_slash_escaped_and_percent_escaped_by_the_provider_is_masked(provider, capsys):
    said = f"raw {ODD} slash {slashed(ODD)} pct {pct(ODD)} low {pct(ODD, True)} end"
    provider.script(Reply(status=401, json={"error": {"message": said}}))
    env = {"OPENAI_API_KEY": ODD, "OPENAI_MODEL": "m", "OPENAI_BASE_URL": provider.base_url}
    result = run_in_process(capsys, env)
    assert result.code == 3, result
    assert "HTTP 401：raw *** slash *** pct *** low *** end；" in result.err_lines[0]
    assert_not_shown(result, ODD)


def test_a_key_cut_by_the_provider_with_three_ascii_dots_is_not_shown(provider, capsys):
    key = "sk-live-7f3a9c2e5b8d1f4a6c0e"  # issue 23
    said = f"Incorrect API key provided: {key[:12]}...{key[-4:]}"
    provider.script(Reply(status=401, json={"error": {"message": said}}))
    env = {"OPENAI_API_KEY": key, "OPENAI_MODEL": "m", "OPENAI_BASE_URL": provider.base_url}
    result = run_in_process(capsys, env)
    assert result.code == 3 and "provided: ***；" in result.err, result  # the end is masked too
    assert_not_shown(result, key)


BACKSLASH_KEY = "sk-back\\slash-7c6b5a4f3e2d1c0b"  # after the first 8: a key character


@pytest.mark.parametrize("shown", [[], ["--show-messages"]], ids=["step-line", "show-messages"])
@pytest.mark.parametrize("key", [BACKSLASH_KEY, ODD], ids=["backslash", "slash-and-backslash"])
def test_a_key_with_json_special_characters_echoed_by_the_model(key, shown, provider, capsys):
    arguments = json.dumps({"a": 248, "b": 15, key: 1})  # the model repeats the key, as a key
    calls = [tool_call("call_1", "multiply", arguments)]
    provider.script(
        completion(tool_calls=calls, finish_reason="tool_calls"),
        completion(content=f"你的 key 是 {key}"),
    )
    env = {"OPENAI_API_KEY": key, "OPENAI_MODEL": "m", "OPENAI_BASE_URL": provider.base_url}
    result = run_in_process(capsys, env, *shown)
    assert result.code == 0, result
    assert "Agent> 你的 key 是 ***\n" in result.out  # as it is
    assert not shown or '"content": "你的 key 是 ***' in result.out  # JSON-escaped
    assert_not_shown(result, key)


def test_a_short_key_masks_nothing_on_a_whole_run(provider, capsys):
    answer = "local 模型在 local 服务上算出 3720（key=local）"
    provider.script(completion(content=answer))
    env = {"OPENAI_API_KEY": "local", "OPENAI_MODEL": "m", "OPENAI_BASE_URL": provider.base_url}
    result = run_in_process(capsys, env, "--show-messages")
    assert (result.code, result.err) == (0, "")
    assert f"Agent> {answer}\n" in result.out and f'"content": "{answer}"' in result.out
    assert "***" not in result.everything
    assert provider.requests[0].headers["authorization"] == "Bearer local"


def test_ordinary_words_the_model_name_and_the_endpoint_stay_visible(provider, capsys):
    answer = f"248 乘以 15 等于 3720；见 https://api.example.com/v1 和 {KEY[:7]}_other"
    said = f"Invalid API key {KEY[:7]}_x for deepseek-chat"
    provider.script(
        completion(content=answer), Reply(status=401, json={"error": {"message": said}})
    )
    env = {
        "OPENAI_API_KEY": KEY,
        "OPENAI_MODEL": "deepseek-chat",
        "OPENAI_BASE_URL": provider.base_url,
    }
    answered = run_in_process(capsys, env, "--show-messages")
    assert answered.code == 0 and f"Agent> {answer}\n" in answered.out, answered
    refused = run_in_process(capsys, env)
    assert refused.code == 3 and f"HTTP 401：{said}；" in refused.err, refused
    assert f"端点 {provider.base_url}，模型 deepseek-chat" in refused.err
    assert "***" not in answered.everything + refused.everything


def test_terminal_control_characters_from_a_provider_are_escaped(provider, capsys):
    said = "密钥无效\x1b[2J\x1b]0;pwned\x07"
    provider.script(
        completion(content="3720\x1b[31m红\x1b[0m"),
        Reply(status=401, json={"error": {"message": said}}),
    )
    env = {"OPENAI_API_KEY": KEY, "OPENAI_MODEL": "m", "OPENAI_BASE_URL": provider.base_url}
    answered = run_in_process(capsys, env)
    refused = run_in_process(capsys, env)
    assert answered.code == 0 and "Agent> 3720\\u001b[31m红\\u001b[0m\n" in answered.out
    assert refused.code == 3 and "密钥无效\\u001b[2J\\u001b]0;pwned\\u0007；" in refused.err
    assert "\x1b" not in answered.everything + refused.everything
    assert "\x07" not in refused.everything


def test_a_harness_bug_traceback_masks_the_key(monkeypatch, capsys):
    def broken(environment):
        raise RuntimeError(f"bug with {json.dumps({'key': ODD})} and {ODD}")

    monkeypatch.setattr(lesson, "check_config", broken)
    result = run_in_process(capsys, {"OPENAI_API_KEY": ODD, "OPENAI_MODEL": "m"})
    assert result.code == 1 and result.err.startswith("[Harness] "), result
    assert "Traceback (most recent call last)" in result.err
    assert 'RuntimeError: bug with {"key": "***"} and ***' in result.err
    assert_not_shown(result, ODD)


def test_the_usage_error_masks_the_key(capsys):
    env = {"OPENAI_API_KEY": KEY, "OPENAI_MODEL": "m"}
    result = run_in_process(capsys, env, f"--token={KEY}")
    assert result.code == 2 and "不认识的选项 --token=***" in result.err, result
    long = run_in_process(capsys, env, "--x" + "y" * 100 + KEY)  # the key at the end of a word
    assert long.code == 2 and "y***" in long.err, long
    assert_not_shown(result, KEY)
    assert_not_shown(long, KEY)


def test_the_self_check_output_masks_the_key(monkeypatch, capsys):
    env = {"OPENAI_API_KEY": KEY}
    passed = run_in_process(capsys, env, "--self-check")
    assert passed == run_in_process(capsys, {}, "--self-check")  # a key changes nothing shown
    assert passed.code == 0 and "***" not in passed.everything

    def failing():
        raise AssertionError(f"收到 {KEY}")

    monkeypatch.setattr(lesson, "SELF_CHECKS", [("假的一项", failing)])
    failed = run_in_process(capsys, env, "--self-check")
    assert failed.code == 1 and "[1/1] 失败：假的一项：收到 ***" in failed.err, failed
    assert_not_shown(failed, KEY)


def test_a_key_with_a_slash_escaped_as_backslash_slash_is_not_shown(provider, capsys):
    r"""JSON may write / as \/ (PHP's json_encode does, by default); a body with no words field is
    quoted as it is."""
    key = "gw/7Hq+Zr2/Lm9pXv4Tn"
    body = json.dumps({"error": {"code": 401, "param": key}}).replace("/", "\\/")
    provider.script(Reply(status=401, body=body.encode(), content_type="application/json"))
    env = {"OPENAI_API_KEY": key, "OPENAI_MODEL": "m", "OPENAI_BASE_URL": provider.base_url}
    result = run_in_process(capsys, env)
    assert result.code == 3 and '"param": "***"' in result.err, result
    assert "Lm9pXv4Tn" not in result.everything


# ---------------------------------------------------------------------------
# Part three: a property over random keys in a provider's error body
# ---------------------------------------------------------------------------

# Real keys use letters, digits, - and _; base64 and gateway keys also / + = and . (of these
# JSON may write only the / differently). " and \, which JSON escapes, are in no provider's keys.
# Keys the configuration check refuses ("..." is a placeholder) never reach a provider.
KEY_CHARACTERS = st.one_of(
    st.sampled_from(string.ascii_letters + string.digits),
    st.sampled_from("/+=-_."),
)
KEYS = st.text(KEY_CHARACTERS, min_size=8, max_size=40).filter(
    lambda key: lesson.variable_problem("OPENAI_API_KEY", key) == ()
)
BASES = ("as it is", "\\/-escaped", "%-escaped")
CASES = ("as sent", "upper", "lower", "lower hex")
CUTS = st.one_of(
    st.none(), st.tuples(st.integers(8, 60), st.sampled_from(["...", "…"]), st.booleans())
)
WAYS = st.tuples(st.sampled_from(BASES), st.sampled_from(CASES), CUTS)
STATUSES = st.sampled_from([400, 401, 403, 429, 500])


def written(key, way):
    """The key as a provider writes it: one of its forms, in some case, maybe cut short (a mark,
    then maybe its last four characters)."""
    base, case, cut = way
    form = forms(key)[base]
    form = {"upper": form.upper(), "lower": form.lower()}.get(case, form)
    form = re.sub("%..", lambda match: match[0].lower(), form) if case == "lower hex" else form
    if cut and cut[0] < len(form):
        length, mark, tail = cut
        form = form[:length] + mark + (form[-4:] if tail else "")
    return form


def error_body(where, said, status):
    """(body, content type) of an error whose words are `said`: in a field the script reads, in
    one it does not (the body is then quoted as it is), or as plain text or a web page."""
    as_json = {
        "message": {"error": {"message": said, "type": "invalid_request_error"}},
        "detail": {"detail": said},
        "gemini list": [{"error": {"code": status, "message": said, "status": "UNAUTHENTICATED"}}],
        "openrouter raw": {
            "error": {
                "message": "Provider returned error",
                "metadata": {"raw": json.dumps({"error": {"message": said}}, ensure_ascii=False)},
            }
        },
        "param": {"error": {"code": "invalid_api_key", "param": said}},
    }
    if where in as_json:
        return json.dumps(as_json[where], ensure_ascii=False), "application/json"
    if where == "text":
        return said, "text/plain"
    return (
        f"<html><head><title>{status} {said}</title></head><body>{said}</body></html>",
        "text/html",
    )


WHERES = ("message", "detail", "gemini list", "openrouter raw", "param", "text", "html")


@pytest.fixture(scope="module")
def shared_provider():
    with ProviderServer() as server:
        yield server


def main_with(provider, key, body, content_type, status):
    provider.script(Reply(status=status, body=body.encode(), content_type=content_type))
    env = {"OPENAI_API_KEY": key, "OPENAI_MODEL": "m", "OPENAI_BASE_URL": provider.base_url}
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = lesson.main(["--show-messages"], env)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def fixed_text(shared_provider):
    """Everything a run shows that is not the key: the report's own words for each status and
    each kind of body, with the key left out."""
    shown = ""
    for status in (400, 401, 403, 429, 500):
        for where in WHERES:
            code, out, err = main_with(
                shared_provider, "local", *error_body(where, "密钥无效：", status), status
            )
            assert code == 3, err
            shown += out + err + error_body(where, "密钥无效：", status)[0]
    return shown.lower()


@settings(max_examples=80, deadline=None)
@given(
    key=KEYS,
    ways=st.lists(WAYS, min_size=1, max_size=3),
    where=st.sampled_from(WHERES),
    status=STATUSES,
)
@example(  # issue 23: a provider cuts the key with three ASCII dots and shows its end
    key="sk-live-0123456789abcdef",
    ways=[("as it is", "as sent", (12, "...", True))],
    where="message",
    status=401,
)
@example(  # issue 23: a body %-escapes the key in lower-case hex
    key="gw/7Hq+Zr2/Lm9pXv4",
    ways=[("%-escaped", "lower hex", None)],
    where="message",
    status=400,
)
@example(  # a body quoted as it is (no words field), the key upper-cased
    key="sk-a/b+cdefghijklmnop", ways=[("as it is", "upper", None)], where="param", status=401
)
def test_no_form_of_a_random_key_in_an_error_body_is_shown(
    shared_provider, fixed_text, key, ways, where, status
):
    # A key's \/-escaped form inside a field quoted as it is would be escaped twice (\\/): a
    # level the mask does not cover (dropped with issue 28)
    assume(not (where == "param" and any(way[0] == "\\/-escaped" for way in ways)))
    # The report's own words must not happen to hold 8 characters of the key
    assume(
        not set().union(*(runs_of_8(form.lower()) for form in forms(key).values()))
        & runs_of_8(fixed_text)
    )
    said = "密钥无效：" + " / ".join(written(key, way) for way in ways) + "。请检查"
    code, out, err = main_with(shared_provider, key, *error_body(where, said, status), status)
    assert code == 3 and err.startswith(f"[Provider] step 1: HTTP {status}："), err
    assert "密钥无效" in err, err  # the provider's words were quoted
    assert shown_forms(out + err, key) == [], (said, out + err)
