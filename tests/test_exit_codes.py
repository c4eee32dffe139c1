"""main(): the class of the exception that stops a run decides the exit code, and the two-line
report starts with the exception's link. Driven in-process by making run_agent() raise the stop,
so nothing is sent: the configuration is valid, the client is built, no request goes out."""

import json

import pytest

import lesson_03_tool_calling_loop as lesson
from tests.provider_server import Reply, completion, tool_call
from tests.runs import run_in_process

ENV = {"OPENAI_API_KEY": "local", "OPENAI_MODEL": "m", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}


class QuotaStop(lesson.RequestFailed):
    """A subclass a learner might add: its own exit_code is honoured, not its base class's."""

    exit_code = 7


class PausedForReview(lesson.AgentStop):
    """A stop a learner adds to part 1 (a tool that waits for a human's yes, say): a subclass
    of AgentStop, with its own exit code."""

    exit_code = 5


STOPS = [
    pytest.param(lesson.AgentStop, 1, id="AgentStop"),
    pytest.param(lesson.ConfigError, 2, id="ConfigError"),
    pytest.param(lesson.RequestFailed, 3, id="RequestFailed"),
    pytest.param(QuotaStop, 7, id="subclass-with-its-own-exit-code"),
    pytest.param(PausedForReview, 5, id="AgentStop-subclass-with-its-own-exit-code"),
]


@pytest.mark.parametrize(("stop_class", "code"), STOPS)
def test_the_class_of_the_stop_decides_the_exit_code(capsys, monkeypatch, stop_class, code):
    def stopped(*_args, **_kwargs):
        raise stop_class("TestLink", "stopped on purpose", "do the test's thing")

    monkeypatch.setattr(lesson, "run_agent", stopped)
    result = run_in_process(capsys, ENV)
    first = result.err_lines[0] if result.err_lines else ""
    assert (result.code, result.out, len(result.err_lines)) == (code, "", 2), result.err
    assert first.startswith("[TestLink] ") and "stopped on purpose" in first, first
    assert "do the test's thing" in result.err_lines[1], result.err


def test_the_constants_behind_the_classes():
    # The exit codes HELP documents are the classes' own attributes, not numbers in main()
    classes = (lesson.AgentStop, lesson.ConfigError, lesson.RequestFailed)
    assert [stop.exit_code for stop in classes] == [
        lesson.EXIT_STOPPED,
        lesson.EXIT_USAGE,
        lesson.EXIT_REQUEST_FAILED,
    ]
    assert (lesson.EXIT_OK, lesson.EXIT_STOPPED, lesson.EXIT_USAGE) == (0, 1, 2)
    assert lesson.EXIT_REQUEST_FAILED == 3


def test_any_other_exception_is_the_harness_own_bug_exit_1_with_its_traceback(capsys, monkeypatch):
    def crashed(*_args, **_kwargs):
        raise ZeroDivisionError("a bug planted by the test")

    monkeypatch.setattr(lesson, "run_agent", crashed)
    result = run_in_process(capsys, ENV)
    assert (result.code, result.err.startswith("[Harness] ")) == (1, True), result.err
    assert "Traceback" in result.err and "a bug planted by the test" in result.err, result.err


def test_ctrl_c_anywhere_in_the_run_is_exit_130_in_one_line(capsys, monkeypatch):
    def interrupted(*_args, **_kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(lesson, "run_agent", interrupted)
    result = run_in_process(capsys, ENV)
    assert (result.code, len(result.err_lines), "Traceback" in result.err) == (130, 1, False)


# ---------------------------------------------------------------------------
# The same, from the real causes: the class decides, whatever the link in the report says
# ---------------------------------------------------------------------------

KEY = "sk-exit-codes-0123456789"
CALL_1 = tool_call("call_1", "multiply", '{"a":248,"b":15}')
TOOL_TURN = completion(tool_calls=[CALL_1], finish_reason="tool_calls")
NO_TOOLS = {"error": {"message": "This model does not support tools", "type": "invalid_request"}}


@pytest.fixture
def online(provider, capsys):
    """main() in-process against the scripted provider; `variables` override the environment."""

    def runner(*args, **variables):
        env = {"OPENAI_API_KEY": KEY, "OPENAI_MODEL": "m", "OPENAI_BASE_URL": provider.base_url}
        return run_in_process(capsys, {**env, **variables}, *args)

    return runner


CAUSES = [  # (the provider's replies, variables, the link the report names, the exit code)
    pytest.param([], {"OPENAI_MODEL": ""}, "Harness", 2, id="config-missing-model"),
    pytest.param([], {"OPENAI_BASE_URL": "ftp://127.0.0.1/v1"}, "Harness", 2, id="config-url"),
    pytest.param(
        [Reply(status=400, json={"error": {"message": "bad"}})], {}, "Provider", 3, id="http-400"
    ),
    # a 200 the loop cannot read: the provider's failure, a failed request
    pytest.param([Reply(json={})], {}, "Provider", 3, id="200-without-a-choice"),
    # a request that failed because of the model: link Model, still a failed request
    pytest.param([Reply(status=400, json=NO_TOOLS)], {}, "Model", 3, id="tools-unsupported"),
    pytest.param([completion(content=None, refusal="I can't")], {}, "Model", 1, id="refused"),
    # a reply the loop stops on because of the provider: link Provider, still a stopped loop
    pytest.param(
        [completion(content='{"name": "multiply", "arguments": {"a": 1, "b": 2}}')],
        {},
        "Provider",
        1,
        id="call-written-as-text",
    ),
    pytest.param([completion(content="42", finish_reason="length")], {}, "Model", 1, id="length"),
]


@pytest.mark.parametrize(("replies", "variables", "link", "code"), CAUSES)
def test_each_real_cause_ends_with_its_class_exit_code(
    online, provider, replies, variables, link, code
):
    provider.script(*replies)
    result = online(**variables)
    first = result.err_lines[0] if result.err_lines else ""
    assert (result.code, len(result.err_lines)) == (code, 2), result.everything
    assert first.startswith(f"[{link}] "), first
    assert "Traceback" not in result.err and KEY not in result.everything


def test_a_request_that_reaches_no_server_is_exit_3(online, closed_port_url):
    result = online(OPENAI_BASE_URL=closed_port_url)
    assert (result.code, len(result.err_lines)) == (3, 2), result.everything
    assert result.err_lines[0].startswith("[SDK/网络] step 1: "), result.err


def test_a_stop_class_added_to_part_1_is_honoured_inside_the_loop(online, provider, monkeypatch):
    def multiply(a, b):  # a learner's edit to part 1: the tool asks for a review first
        raise PausedForReview(lesson.HARNESS, "等人确认", "确认后再运行")

    monkeypatch.setattr(lesson, "multiply", multiply)
    provider.script(TOOL_TURN, completion(content="3720"))
    result = online()
    assert (result.code, len(provider.requests)) == (5, 1), result.everything
    assert result.err_lines[0].startswith("[Harness] step 1: 等人确认"), result.err
    assert "Traceback" not in result.err


def test_a_bug_in_a_part_1_function_is_exit_1_with_the_harness_line_and_traceback(
    online, provider, monkeypatch
):
    def multiply(a, b):  # a learner's edit that breaks the tool: not the outside world
        return {"a": a}["b"]

    monkeypatch.setattr(lesson, "multiply", multiply)
    provider.script(TOOL_TURN, completion(content="3720"))
    result = online()
    assert result.code == 1, result.everything
    assert result.err_lines[0].startswith("[Harness] "), result.err
    assert "Traceback (most recent call last)" in result.err and "KeyError" in result.err
    assert "建议：" not in result.err  # not a two-line report of a stop
    assert result.out.startswith("step 1: finish_reason=tool_calls\n"), result.out
    assert len(provider.requests) == 1 and KEY not in result.everything


@pytest.mark.parametrize("show_messages", [False, True], ids=["plain", "show-messages"])
def test_ctrl_c_inside_the_loop_is_exit_130_one_line_without_traceback(
    online, provider, monkeypatch, show_messages
):
    def multiply(a, b):  # the user presses Ctrl-C while the tool runs
        raise KeyboardInterrupt

    monkeypatch.setattr(lesson, "multiply", multiply)
    provider.script(TOOL_TURN, completion(content="3720"))
    result = online(*(["--show-messages"] if show_messages else []))
    assert (result.code, len(result.err_lines)) == (130, 1), result.err
    assert "Traceback" not in result.err and "KeyboardInterrupt" not in result.err
    lines = result.out.splitlines()
    assert lines[0] == "step 1: finish_reason=tool_calls", result.out
    if show_messages:  # the history is still printed: what was asked, the call it stopped in
        history = json.loads("\n".join(lines[1:]))
        assert [message["role"] for message in history] == ["user", "assistant"], history
    else:
        assert lines == ["step 1: finish_reason=tool_calls"], result.out
