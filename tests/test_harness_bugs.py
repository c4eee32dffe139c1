"""Only the outside world's failures become two-line reports. Anything else is a bug in the
harness (or in a learner's edit): one line saying so, then Python's traceback, exit 1 - on the
online run, --self-check and --demo alike. A user can cause none of these.

One boundary is drawn on purpose: the SDK reads a response's bytes inside its own call, so what
its HTTP library raises while reading them (a body cut off or stalled, a lying Content-Encoding)
is the SDK's failure, [SDK/网络], exit 3; bytes it hands over that the loop cannot read (not
UTF-8, not JSON, not the shape) are the provider's failure, exit 3, from the one gate
read_reply(). The SDK's failures are translated only when they are openai.APIError; anything
else it raises, and any bug in the script's code after the bytes were read, is a harness bug.
main() runs in-process; the SDK is the real one unless a test stands a scripted one in for it."""

import json

import openai
import pytest

import lesson_03_tool_calling_loop as lesson
from tests.provider_server import Reply, completion, tool_call
from tests.runs import Run, run_in_process

KEY = "sk-harness-bug-0123456789abcdef"
BUG_LINE = "[Harness] 程序自身出错了"
ANSWER_BYTES = json.dumps(completion(content="248 乘以 15 等于 3720。")).encode()


@pytest.fixture
def run(provider, capsys):
    def runner(*args, base_url=None):
        env = {"OPENAI_API_KEY": KEY, "OPENAI_MODEL": "m"}
        env["OPENAI_BASE_URL"] = base_url or provider.base_url
        return run_in_process(capsys, env, *args)

    return runner


def assert_shown_as_a_bug(result, exception_name):
    assert result.code == 1, result.everything
    assert result.err.startswith(BUG_LINE), result.err
    assert "Traceback (most recent call last)" in result.err and exception_name in result.err
    assert "[SDK/网络]" not in result.err and "[Provider]" not in result.err
    assert KEY not in result.everything


def assert_the_providers_failure(result):
    first, _ = result.err_lines
    assert result.code == 3, result.everything
    assert first.startswith("[Provider] step 1: HTTP 200"), result.err
    assert "Traceback" not in result.err and BUG_LINE not in result.err
    assert KEY not in result.everything


def test_a_bug_in_the_tool_path_online_is_shown_with_its_traceback(run, provider, monkeypatch):
    def broken_router(call):
        return [][0]  # a learner's edit that breaks the Router

    monkeypatch.setattr(lesson, "execute_tool", broken_router)
    calls = [tool_call("call_1", "multiply", '{"a":248,"b":15}')]
    provider.script(completion(tool_calls=calls, finish_reason="tool_calls"))
    result = run()
    assert_shown_as_a_bug(result, "IndexError")
    assert len(provider.requests) == 1


def broken(*args, **kwargs):
    raise AttributeError("a harness bug in the diagnosis")


def test_a_bug_in_explaining_a_network_failure_is_shown_not_reported(
    run, closed_port_url, monkeypatch
):
    monkeypatch.setattr(lesson, "network_failure", broken)
    assert_shown_as_a_bug(run(base_url=closed_port_url), "AttributeError")


@pytest.mark.parametrize(
    "reply",
    [Reply(status=400, json={"error": {"message": "bad"}}), Reply(json={"choices": []})],
    ids=["HTTP 400", "a 200 without a choice"],
)
def test_a_bug_in_explaining_a_providers_failure_is_shown_not_reported(
    run, provider, monkeypatch, reply
):
    monkeypatch.setattr(lesson, "provider_failure", broken)
    provider.script(reply)
    assert_shown_as_a_bug(run(), "AttributeError")
    assert len(provider.requests) == 1


def test_a_bug_after_the_bytes_were_read_is_not_called_the_providers_failure(
    run, provider, monkeypatch
):
    # The gate covers reading the bytes, not the harness's own code that shapes what they said
    def broken_shape(spec, value, where):
        raise KeyError("a harness bug in shaping the reply")

    monkeypatch.setattr(lesson, "shaped", broken_shape)
    provider.script(completion(content="248 乘以 15 等于 3720。"))
    assert_shown_as_a_bug(run(), "KeyError")
    assert len(provider.requests) == 1


def test_a_check_that_crashes_is_a_bug_not_a_failed_check(capsys, monkeypatch):
    def crashing_check():
        return {}["missing"]

    monkeypatch.setattr(lesson, "SELF_CHECKS", [("一项会崩的检查", crashing_check)])
    code = lesson.main(["--self-check"], {})
    captured = capsys.readouterr()
    assert_shown_as_a_bug(Run(code, captured.out, captured.err), "KeyError")
    assert "self-check failed" not in captured.err  # a failed check reads differently


def test_a_failed_check_is_still_a_failed_check_without_a_traceback(capsys, monkeypatch):
    def failing_check():
        lesson.expect(False, "这一项没通过")

    monkeypatch.setattr(lesson, "SELF_CHECKS", [("一项会失败的检查", failing_check)])
    code = lesson.main(["--self-check"], {})
    err = capsys.readouterr().err
    assert (code, err.splitlines()) == (
        1,
        ["[1/1] 失败：一项会失败的检查：这一项没通过", "self-check failed"],
    )


def test_a_bug_in_the_demo_is_shown_with_its_traceback(capsys, monkeypatch):
    def broken_router(call):
        raise TypeError("a learner's edit")

    monkeypatch.setattr(lesson, "execute_tool", broken_router)
    code = lesson.main(["--demo"], {})
    captured = capsys.readouterr()
    assert_shown_as_a_bug(Run(code, captured.out, captured.err), "TypeError")


class ScriptedSdk:
    """Stands in for openai.OpenAI: every request raises `on_send` (as the SDK's own call would),
    or answers HTTP `status` with `body`, already read, as with_raw_response hands it over."""

    def __init__(self, on_send=None, body=b"", status=200):
        self.on_send, self.body, self.status = on_send, body, status

    def __call__(self, **options):  # openai.OpenAI(api_key=..., base_url=..., ...)
        raw = type("Raw", (), {"create": self.create})()
        completions = type("Completions", (), {"with_raw_response": raw})()
        return type("Client", (), {"chat": type("Chat", (), {"completions": completions})()})()

    def create(self, **request):
        if self.on_send is not None:
            raise self.on_send
        http_response = type("Response", (), {"content": self.body, "status_code": self.status})
        return type("Raw", (), {"http_response": http_response()})()


@pytest.mark.parametrize(
    "error",
    [ValueError("x"), IndexError("pop from empty list"), AttributeError("y"), OSError()],
    ids=lambda error: type(error).__name__,
)
def test_exceptions_the_sdk_does_not_raise_are_not_translated(run, monkeypatch, error):
    # Only APIStatusError and APIConnectionError (with its APITimeoutError) are the SDK's way of
    # saying a request failed; anything else raised while sending is shown as it is
    monkeypatch.setattr(openai, "OpenAI", ScriptedSdk(on_send=error))
    assert_shown_as_a_bug(run(), type(error).__name__)


def test_a_2xx_body_is_reported_under_its_real_status(run, monkeypatch):
    monkeypatch.setattr(openai, "OpenAI", ScriptedSdk(body=b'{"choi', status=203))
    result = run()
    assert result.code == 3 and result.err.startswith("[Provider] step 1: HTTP 203，"), result.err
    assert '{"choi' in result.err  # the start is quoted


# The SDK reads the body inside its own call: a body that stalls after the headers is its read
# timeout, named with the seconds of OPENAI_TIMEOUT (a body cut off or wrongly encoded:
# tests/test_online.py), never the harness's failure and never the gate's.
def test_a_body_that_stalls_after_the_headers_is_the_read_timeout_that_expired(capsys, provider):
    provider.script(Reply(json=completion(content="3720"), drip=2.0), completion(content="3720"))
    env = {"OPENAI_API_KEY": KEY, "OPENAI_MODEL": "m", "OPENAI_BASE_URL": provider.base_url}
    result = run_in_process(capsys, {**env, "OPENAI_TIMEOUT": "1"})
    first, second = result.err_lines
    assert (result.code, first.startswith("[SDK/网络] step 1: 连上了")) == (3, True), result.err
    assert "1 秒（OPENAI_TIMEOUT）" in first and "ReadTimeout" in first, first
    assert "OPENAI_TIMEOUT" in second, second
    assert "Traceback" not in result.err and KEY not in result.everything
    assert len(provider.requests) == 1  # one attempt: the lesson does not retry


@pytest.fixture
def http():
    """The SDK's HTTP library: httpx for openai 1.x and 2.x, its successor for 3.x."""
    import importlib

    return importlib.import_module(openai.DefaultHttpxClient.__mro__[1].__module__.split(".")[0])


def connection_error(http, cause_type, message, error_type=openai.APIConnectionError):
    """The SDK's APIConnectionError (or a subclass) for a request that failed with this cause."""
    request = http.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
    error = error_type(request=request)
    error.__cause__ = getattr(http, cause_type)(message, request=request)
    return error


@pytest.mark.parametrize(
    ("cause", "message"),
    [
        ("RemoteProtocolError", "peer closed connection"),
        ("ConnectError", "[Errno 111] Connection refused"),
        ("TooManyRedirects", "Exceeded maximum allowed redirects."),
    ],
)
def test_the_sdks_connection_errors_are_the_networks_failure(
    run, monkeypatch, http, cause, message
):
    monkeypatch.setattr(
        openai, "OpenAI", ScriptedSdk(on_send=connection_error(http, cause, message))
    )
    result = run()
    first, _ = result.err_lines
    assert (result.code, first.startswith("[SDK/网络] step 1: ")) == (3, True), result.err
    assert f"{cause}: {message}" in first  # the HTTP library's own words
    assert "Traceback" not in result.err and KEY not in result.everything


def test_the_sdks_status_errors_are_the_providers_failure(run, monkeypatch, http):
    request = http.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
    body = {"error": {"message": "the provider's own words"}}
    response = http.Response(418, json=body, request=request)
    error = openai.APIStatusError("teapot", response=response, body=body)
    monkeypatch.setattr(openai, "OpenAI", ScriptedSdk(on_send=error))
    result = run()
    assert result.code == 3, result.everything
    assert result.err.startswith("[Provider] step 1: HTTP 418：the provider's own words")
    assert "Traceback" not in result.err


def test_a_timeout_inside_the_sdk_is_translated_by_its_type(run, monkeypatch, http):
    error = connection_error(http, "ReadTimeout", "timed out", openai.APITimeoutError)
    monkeypatch.setattr(openai, "OpenAI", ScriptedSdk(on_send=error))
    result = run()
    first, second = result.err_lines
    assert (result.code, first.startswith("[SDK/网络] step 1: ")) == (3, True), result.err
    assert "ReadTimeout" in first and "OPENAI_TIMEOUT" in second


def test_a_body_nested_too_deep_is_the_providers_fault(run, provider):
    provider.script(Reply(body=b"[" * 100_000 + b"]" * 100_000, content_type="application/json"))
    result = run()
    assert_the_providers_failure(result)
    assert "openai" not in result.err_lines[1]  # nothing suggests the SDK is at fault


def test_a_200_body_that_is_not_json_is_the_providers_fault(run, provider):
    provider.script(Reply(body=b"not json at all", content_type="application/json"))
    result = run("--show-messages")
    assert_the_providers_failure(result)
    assert "not json at all" in result.err  # the body's start is quoted
    assert json.loads(result.out) == [{"role": "user", "content": lesson.DEFAULT_QUESTION}]


def test_the_history_is_still_printed_when_a_bug_stops_the_run(run, provider, monkeypatch):
    monkeypatch.setattr(lesson, "execute_tool", lambda call: 1 / 0)
    calls = [tool_call("call_1", "multiply", '{"a":248,"b":15}')]
    provider.script(completion(tool_calls=calls, finish_reason="tool_calls"))
    result = run("--show-messages")
    assert_shown_as_a_bug(result, "ZeroDivisionError")
    history = json.loads(result.out[result.out.index("[") :])
    assert [m["role"] for m in history] == ["user", "assistant"]
