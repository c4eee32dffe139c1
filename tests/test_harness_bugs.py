"""Rule 4: only the outside world's failures become two-line reports. Anything else is a bug in
the harness (or in a learner's edit): one line saying so, then Python's traceback, exit 1 - on
the online run, --self-check and --demo alike. main() runs in-process; the SDK is the real one."""

import json

import openai
import pytest

import lesson_03_tool_calling_loop as lesson
from tests.provider_server import Reply, completion, tool_call
from tests.runs import Run, run_in_process

pytestmark = pytest.mark.usefixtures("quick_sdk_retries")
KEY = "sk-harness-bug-0123456789abcdef"
BUG_LINE = "[Harness] 程序自身出错了"


@pytest.fixture
def run(provider, capsys):
    def runner(*args):
        env = {"OPENAI_API_KEY": KEY, "OPENAI_MODEL": "m", "OPENAI_BASE_URL": provider.base_url}
        return run_in_process(capsys, env, *args)

    return runner


def assert_shown_as_a_bug(result, exception_name):
    assert result.code == 1, result.everything
    assert result.err.startswith(BUG_LINE), result.err
    assert "Traceback (most recent call last)" in result.err and exception_name in result.err
    assert "[SDK/网络]" not in result.err and "[Provider]" not in result.err
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


def test_a_bug_inside_the_request_path_is_not_called_a_network_failure(run, provider, monkeypatch):
    # Before rule 4 a catch-all around the request turned this into "[SDK/网络] 请求失败"
    def broken_create(self, **request):
        raise KeyError("a harness bug, not the network")

    monkeypatch.setattr(lesson.OnlineClient, "create", broken_create)
    assert_shown_as_a_bug(run(), "KeyError")
    assert provider.requests == []


def test_a_bug_reading_the_bytes_of_a_200_is_not_called_the_providers_failure(
    run, provider, monkeypatch
):
    def broken_reader(body):
        raise KeyError("a harness bug in reading the body")

    monkeypatch.setattr(lesson, "read_response", broken_reader)
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


@pytest.mark.parametrize(
    "error", [ValueError("x"), IndexError("pop from empty list"), AttributeError("y"), OSError()]
)
def test_exceptions_the_sdk_does_not_raise_are_not_translated(error):
    assert lesson.explain_request_failure(error, "http://127.0.0.1:9/v1", ()) is None


@pytest.fixture
def http_library():
    import importlib

    return importlib.import_module(openai.DefaultHttpxClient.__mro__[1].__module__)


def test_the_sdks_own_failures_are_translated_by_their_type(http_library):
    request = http_library.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
    cases = {
        http_library.RemoteProtocolError("peer closed connection", request=request): "中途断开",
        http_library.ConnectError("[Errno 111] Connection refused", request=request): "连不上",
        http_library.TooManyRedirects("Exceeded maximum allowed redirects.", request=request): (
            "重定向循环"
        ),
    }
    for cause, words in cases.items():
        error = openai.APIConnectionError(request=request)
        error.__cause__ = cause
        stop = lesson.explain_request_failure(error, "http://127.0.0.1:9/v1", ())
        assert (stop.link, stop.exit_code) == ("SDK/网络", 3), stop
        assert words in stop.reason and str(cause) in stop.reason


def test_a_timeout_inside_the_sdk_is_translated_by_its_type(http_library):
    request = http_library.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
    error = openai.APITimeoutError(request=request)
    error.__cause__ = http_library.ReadTimeout("timed out", request=request)
    stop = lesson.explain_request_failure(error, "http://127.0.0.1:9/v1", ())
    assert (stop.link, stop.exit_code) == ("SDK/网络", 3)
    assert "OPENAI_TIMEOUT" in stop.hint


def test_a_body_nested_too_deep_is_the_providers_fault_not_the_sdk_version(run, provider):
    provider.script(Reply(body=b"[" * 100_000 + b"]" * 100_000, content_type="application/json"))
    result = run()
    first, second = result.err.splitlines()
    assert result.code == 3 and first.startswith("[Provider] step 1: ")
    assert "openai" not in second and "版本问题" not in first, result.err
    assert "Traceback" not in result.err


def test_a_200_body_that_is_not_json_is_the_providers_fault(run, provider):
    provider.script(Reply(body=b"not json at all", content_type="application/json"))
    result = run("--show-messages")
    first, _ = result.err.splitlines()
    assert "被拒收" not in result.out  # the body never became a response: nothing was refused
    assert result.code == 3 and first.startswith("[Provider] step 1: HTTP 200"), result.err
    assert "Traceback" not in result.err and KEY not in result.everything


def test_the_history_is_still_printed_when_a_bug_stops_the_run(run, provider, monkeypatch):
    monkeypatch.setattr(lesson, "execute_tool", lambda call: 1 / 0)
    calls = [tool_call("call_1", "multiply", '{"a":248,"b":15}')]
    provider.script(completion(tool_calls=calls, finish_reason="tool_calls"))
    result = run("--show-messages")
    assert_shown_as_a_bug(result, "ZeroDivisionError")
    history = json.loads(result.out[result.out.index("[") :])
    assert [m["role"] for m in history] == ["user", "assistant"]
