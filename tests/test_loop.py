"""run_agent() against provider-shaped fakes: the message sequence and every stop-the-loop rule.

The fakes are dicts, JSON as a provider sends it; part 2's FakeClient hands their bytes to the
real gate read_reply(), so every reply here is read the way an HTTP 200 is read online."""

import io
import json
import re
import unicodedata
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import lesson_03_tool_calling_loop as lesson
from lesson_03_tool_calling_loop import (
    MAX_STEPS,
    AgentStop,
    RequestFailed,
    fake_call,
    fake_response,
    run_fake,
)
from tests.runs import pairing_problems

RESULT_3720 = '{"status":"completed","result":3720}'
ANSWER = "248 乘以 15 等于 3720。"
ONLY_THE_QUESTION = [{"role": "user", "content": lesson.DEFAULT_QUESTION}]


def final(content=ANSWER):
    return fake_response("stop", content=content)


def calls(*tool_calls):
    return fake_response("tool_calls", tool_calls=list(tool_calls))


def reported(stop, messages):
    """The two lines report() prints for a stop: [link] step N: reason / last event and hint."""
    printed = io.StringIO()
    lesson.report(stop, {}, messages, file=printed)
    return printed.getvalue().split("\n")[:-1]  # lines end at \n only (not at \x85, \u2028)


def last_event(stop, messages):
    """The last successful event, as report() derives it from the history."""
    _, second = reported(stop, messages)
    return second.split("；建议：")[0]


def test_happy_path_prints_the_articles_step_lines(capsys):
    client = lesson.FakeClient(calls(fake_call("call_1")), final())
    messages = []
    answer = lesson.run_agent(client, "m", "帮我算一下 248 乘以 15", messages)
    assert answer == ANSWER
    assert capsys.readouterr().out.splitlines() == [
        "step 1: finish_reason=tool_calls",
        f"step 1: multiply call_id=call_1 result={RESULT_3720}",
        "step 2: finish_reason=stop",
    ]
    assert messages == [
        {"role": "user", "content": "帮我算一下 248 乘以 15"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "multiply", "arguments": '{"a":248,"b":15}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": RESULT_3720},
        {"role": "assistant", "content": ANSWER},
    ]


def test_each_request_sends_only_model_messages_tools():
    client = lesson.FakeClient(calls(fake_call("call_1")), final())
    lesson.run_agent(client, "my-model", "q")
    assert [set(r) for r in client.requests] == [{"model", "messages", "tools"}] * 2
    assert all(r["model"] == "my-model" and r["tools"] == lesson.TOOLS for r in client.requests)
    assert [m["role"] for m in client.requests[1]["messages"]] == ["user", "assistant", "tool"]


def test_tools_schema_is_the_articles():
    (tool,) = lesson.TOOLS
    assert tool["type"] == "function" and tool["function"]["name"] == "multiply"
    assert tool["function"]["parameters"] == {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
        "additionalProperties": False,
    }


@pytest.mark.parametrize("content", [None, "", "我来调用乘法工具。"])
def test_content_beside_tool_calls_is_saved_as_a_string(content):
    _, client, messages, _ = run_fake(
        fake_response("tool_calls", content=content, tool_calls=[fake_call("call_1")]), final()
    )
    assert messages[1]["content"] == (content or "")
    assert client.requests[1]["messages"][1]["content"] == (content or "")


def test_parallel_calls_run_in_order_and_pair_by_id():
    outcome, _, messages, lines = run_fake(
        calls(fake_call("call_1"), fake_call("call_2", '{"a":6,"b":7}')), final("3720, 42")
    )
    assert outcome == "3720, 42"
    tools = [m for m in messages if m["role"] == "tool"]
    assert [(m["tool_call_id"], json.loads(m["content"])["result"]) for m in tools] == [
        ("call_1", 3720),
        ("call_2", 42),
    ]
    assert [line.split(" result=")[0] for line in lines[1:3]] == [
        "step 1: multiply call_id=call_1",
        "step 1: multiply call_id=call_2",
    ]


@pytest.mark.parametrize(
    "call_id",
    ["functions.multiply:0", "aB3dE5fG7", "chatcmpl-tool-9f1c", "0", "call__0_multiply_x"],
)
def test_provider_id_formats_are_echoed_unchanged(call_id):
    _, client, _, _ = run_fake(calls(fake_call(call_id)), final())
    sent = client.requests[1]["messages"]
    assert sent[1]["tool_calls"][0]["id"] == call_id
    assert sent[2]["tool_call_id"] == call_id


@pytest.mark.parametrize(
    "arguments",
    ['{"a":true,"b":15}', '{"a":"248","b":15}', '{"a":248.0,"b":15}', '{"a":1,"a":248,"b":15}', ""],
)
def test_bad_arguments_go_back_to_the_model_and_the_loop_continues(arguments):
    outcome, client, messages, _ = run_fake(
        calls(fake_call("call_1", arguments)), calls(fake_call("call_2")), final()
    )
    assert outcome == ANSWER
    assert len(client.requests) == 3
    first_result = json.loads(client.requests[1]["messages"][2]["content"])
    assert first_result["status"] == "error"
    assert messages[4] == {"role": "tool", "tool_call_id": "call_2", "content": RESULT_3720}


def test_unknown_tool_goes_back_to_the_model():
    _, client, _, _ = run_fake(calls(fake_call("call_1", name="rm_rf")), final("不能这样做"))
    result = json.loads(client.requests[1]["messages"][2]["content"])
    assert result["status"] == "error" and "rm_rf" in result["message"]


def test_tool_calls_with_finish_reason_stop_run_like_tool_calls():
    # The one deliberate difference from the article: some endpoints end a turn of calls with
    # "stop" (Gemini's compatible endpoint, Qwen through OpenRouter). The calls still run.
    with_stop = fake_response("stop", tool_calls=[fake_call("call_1")])
    outcome, client, messages, lines = run_fake(with_stop, final())
    assert outcome == ANSWER and len(client.requests) == 2
    assert lines[:2] == [
        "step 1: finish_reason=stop",
        f"step 1: multiply call_id=call_1 result={RESULT_3720}",
    ]
    assert messages[2] == {"role": "tool", "tool_call_id": "call_1", "content": RESULT_3720}


def test_tool_calls_with_stop_still_pass_the_id_check():
    with_stop = fake_response("stop", tool_calls=[fake_call("c1"), fake_call("c1")])
    outcome, client, messages, _ = run_fake(with_stop, final())
    assert (outcome.link, outcome.exit_code) == ("Provider", 1)
    assert messages == ONLY_THE_QUESTION and len(client.requests) == 1


def without_key(dictionary, key):
    return {k: v for k, v in dictionary.items() if k != key}


# Replies the loop itself refuses: the gate read them, run_agent will not trust them. Exit 1.
LOOP_STOPS = {
    "tool calls with length": (fake_response("length", tool_calls=[fake_call("c")]), "Model"),
    "tool calls cut by length": (
        fake_response("length", tool_calls=[fake_call("c", '{"a":2')]),
        "Model",
    ),
    "tool calls with content_filter": (
        fake_response("content_filter", tool_calls=[fake_call("c")]),
        "Provider",
    ),
    "tool calls with a null finish_reason": (
        fake_response(None, tool_calls=[fake_call("c")]),
        "Provider",
    ),
    "tool calls with an unknown finish_reason": (
        fake_response("eos", tool_calls=[fake_call("c")]),
        "Provider",
    ),
    "tool_calls reason, empty list": (fake_response("tool_calls", tool_calls=[]), "Provider"),
    "tool_calls reason, no list": (fake_response("tool_calls", tool_calls=None), "Provider"),
    "function_call reason": (fake_response("function_call", content="x"), "Provider"),
    "missing id": (calls(without_key(fake_call("x"), "id")), "Provider"),
    "null id": (calls(fake_call(None)), "Provider"),
    "empty id": (calls(fake_call("")), "Provider"),
    "duplicate ids": (calls(fake_call("c1"), fake_call("c1", '{"a":6,"b":7}')), "Provider"),
    "second call unpairable": (calls(fake_call("call_1"), fake_call("")), "Provider"),
    "final with length": (fake_response("length", content="248 乘以 15 等"), "Model"),
    "final with content_filter": (fake_response("content_filter", content=""), "Provider"),
}
UNNATURAL_ENDS = ["error", "sensitive", "network_error", "eos", "model_length", "", None, "STOP"]
LOOP_STOPS.update(
    {
        f"final with {reason!r}": (fake_response(reason, content="3720"), "Provider")
        for reason in UNNATURAL_ENDS
    }
)


@pytest.mark.parametrize(("response", "link"), LOOP_STOPS.values(), ids=LOOP_STOPS.keys())
def test_untrustworthy_replies_stop_the_loop_before_anything_runs(response, link):
    outcome, client, messages, lines = run_fake(response, final())  # never asked for the 2nd
    assert isinstance(outcome, AgentStop) and not isinstance(outcome, RequestFailed)
    assert (outcome.link, outcome.exit_code, outcome.step) == (link, 1, 1)
    assert last_event(outcome, messages) == "最后一个成功事件：step 1: 收到响应"
    assert len(client.requests) == 1
    assert messages == ONLY_THE_QUESTION  # the refused reply is not written to the history
    assert not any("call_id=" in line for line in lines)


def call_with(**fields):
    return {**fake_call("call_1"), **fields}


def call_function(**function):
    return call_with(function=function)


# Replies the gate refuses: what the loop reads is missing or of the wrong type. Exit 3, the
# provider's failure; nothing was received that could be refused, so nothing is shown as refused.
GATE_REFUSALS = {
    "numeric id": calls(fake_call(7)),
    "missing function": calls(without_key(fake_call("c"), "function")),
    "null function": calls(call_with(function=None)),
    # OpenAI's custom tools: the call carries `custom` (free-form input), no `function`
    "a custom tool call": calls(
        {"id": "c", "type": "custom", "custom": {"name": "multiply", "input": "248 15"}}
    ),
    "function without arguments": calls(call_function(name="multiply")),
    "arguments is an object": calls(call_function(name="multiply", arguments={"a": 248})),
    "name is null": calls(call_function(name=None, arguments='{"a":248,"b":15}')),
    "a call that is a string": calls("multiply(248, 15)"),
    "tool_calls is not a list": fake_response("tool_calls", tool_calls={"id": "c"}),
    "content as a list of parts": final([{"type": "text", "text": ANSWER}]),
    "no choices": {"choices": []},
    "choices is null": {"choices": None},
    "choices is an object": {"choices": {"0": final()["choices"][0]}},
    "an empty object": {},
    "a list": [final()],
    "choice without message": {"choices": [{"index": 0, "finish_reason": "stop"}]},
    "message is text": {"choices": [{"message": ANSWER, "finish_reason": "stop"}]},
    "finish_reason is a list": fake_response([], content="3720"),
    "finish_reason is an object": fake_response({}, content="3720"),
    "http 200 error body": {"error": {"message": "upstream down"}},
}


@pytest.mark.parametrize("response", GATE_REFUSALS.values(), ids=GATE_REFUSALS.keys())
def test_replies_the_gate_refuses_are_the_providers_failure_and_nothing_is_written(response):
    outcome, client, messages, lines = run_fake(response, final())
    assert isinstance(outcome, RequestFailed)
    assert (outcome.link, outcome.exit_code, outcome.step) == ("Provider", 3, 1)
    assert len(client.requests) == 1 and messages == ONLY_THE_QUESTION and lines == []


@pytest.mark.parametrize(
    "response",
    [
        {"error": {"message": "upstream model timed out", "code": 502}},
        # OpenRouter puts a failed upstream call inside the choice
        {
            "choices": [
                {
                    "index": 0,
                    "error": {"message": "upstream model timed out", "code": 502},
                    "message": {"role": "assistant", "content": ""},
                    "finish_reason": "error",
                }
            ]
        },
    ],
    ids=["top level", "inside the choice"],
)
def test_an_error_in_a_200_body_is_quoted_in_the_providers_words(response):
    outcome, client, messages, _ = run_fake(response, final())
    assert (outcome.link, outcome.exit_code, outcome.step) == ("Provider", 3, 1)
    assert "upstream model timed out" in outcome.reason
    assert len(client.requests) == 1 and messages == ONLY_THE_QUESTION


@pytest.mark.parametrize("reason", ["length", "eos", "", None, "sensitive"])
def test_the_stop_line_and_the_reason_name_the_finish_reason(reason):
    outcome, _, _, lines = run_fake(fake_response(reason, content="x"))
    assert json.dumps(reason) in outcome.reason
    assert lines == [f"step 1: finish_reason={'null' if reason is None else reason}"]


KNOWN_STOPS = [(reason, None) for reason in sorted(lesson.FINISH_REASONS)]
KNOWN_STOPS += [("length", [fake_call("c")]), ("content_filter", [fake_call("c")])]


@pytest.mark.parametrize(("reason", "tool_calls"), KNOWN_STOPS)
def test_each_known_finish_reason_stops_with_its_own_link_and_hint(reason, tool_calls):
    link, meaning, hint = lesson.FINISH_REASONS[reason]
    outcome, _, messages, lines = run_fake(fake_response(reason, "x", tool_calls), final())
    assert (outcome.link, outcome.hint) == (link, hint)
    assert meaning in outcome.reason
    assert messages == ONLY_THE_QUESTION and not any("call_id=" in line for line in lines)


def test_a_length_stop_is_the_models_and_names_its_output_cap():
    outcome, *_ = run_fake(fake_response("length", content='```json\n{\n  "name": "multiply'))
    assert (outcome.link, outcome.exit_code) == ("Model", 1)
    assert outcome.hint == lesson.FINISH_REASONS["length"][2]


@pytest.mark.parametrize("with_calls", [False, True], ids=["final", "tool calls"])
@pytest.mark.parametrize("reason", ["eos", "sensitive", "", None])
def test_a_value_outside_the_protocol_is_quoted_and_read_literally(reason, with_calls):
    tool_calls = [fake_call("c")] if with_calls else None
    outcome, client, messages, _ = run_fake(fake_response(reason, "3720", tool_calls), final())
    link, meaning, hint = lesson.NOT_IN_PROTOCOL
    assert (outcome.link, outcome.hint, outcome.exit_code) == (link, hint, 1)
    assert json.dumps(reason) in outcome.reason and meaning in outcome.reason
    assert messages == ONLY_THE_QUESTION and len(client.requests) == 1


def test_a_later_stop_reports_the_last_successful_event():
    outcome, client, messages, _ = run_fake(calls(fake_call("call_1")), fake_response("length"))
    assert len(client.requests) == 2
    assert outcome.step == 2
    assert last_event(outcome, messages) == "最后一个成功事件：step 2: 收到响应"
    assert [m["role"] for m in messages] == ["user", "assistant", "tool"]


class FailsOnSecondRequest:
    """Answers with one call, then the request itself fails (the SDK's failure, translated)."""

    def __init__(self):
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self.create))
        self.count = 0

    def create(self, **request):
        self.count += 1
        if self.count == 1:
            return lesson.read_reply(json.dumps(calls(fake_call("call_1"))).encode())
        raise RequestFailed("SDK/网络", "连不上服务器", "检查端点")


def test_a_request_that_fails_refuses_nothing_and_the_last_event_is_the_tool_result():
    messages = []
    with pytest.raises(RequestFailed) as caught:
        lesson.run_agent(FailsOnSecondRequest(), "m", "q", messages)
    stop = caught.value
    assert (stop.step, stop.exit_code) == (2, 3)
    first, second = reported(stop, messages)
    assert first.startswith("[SDK/网络] step 2: ")
    assert second.startswith("最后一个成功事件：call_1 的 Tool Result 已写入历史；")


def failing_client(error):
    def create(**kwargs):
        raise error

    return SimpleNamespace(chat=SimpleNamespace(completions=SimpleNamespace(create=create)))


def test_a_first_request_that_fails_reports_only_the_user_message():
    messages = []
    client = failing_client(RequestFailed("SDK/网络", "连不上服务器", "检查端点"))
    with pytest.raises(AgentStop) as caught:
        lesson.run_agent(client, "m", "q", messages)
    assert caught.value.step == 1
    assert (
        last_event(caught.value, messages)
        == "最后一个成功事件：Harness 已就绪，user 消息已写入历史"
    )


@pytest.mark.parametrize(
    "error", [IndexError("pop from empty list"), TypeError("bad"), KeyError("k")]
)
def test_an_exception_from_the_request_that_is_not_a_stop_is_not_translated(error):
    # Only stops become reports; anything else is a bug, for main() to show with its traceback
    with pytest.raises(type(error)) as caught:
        lesson.run_agent(failing_client(error), "m", "q")
    assert caught.value is error


def test_max_steps_counts_requests_and_the_last_result_stays_local():
    responses = [calls(fake_call(f"call_{n}")) for n in range(1, MAX_STEPS + 5)]
    outcome, client, messages, lines = run_fake(*responses)
    assert (outcome.link, outcome.reason, outcome.exit_code) == ("Harness", "超过最大步骤数：8", 1)
    assert len(client.requests) == MAX_STEPS == 8
    assert len(messages) == 1 + 2 * MAX_STEPS
    assert messages[-1] == {"role": "tool", "tool_call_id": "call_8", "content": RESULT_3720}
    assert "call_8" not in json.dumps(client.requests[-1]["messages"])
    assert lines[-1].startswith("step 8: multiply call_id=call_8")
    # the stop comes after the loop, not at a step; the last event is the result kept locally
    assert reported(outcome, messages) == [
        "[Harness] 超过最大步骤数：8",
        f"最后一个成功事件：call_8 的 Tool Result 已写入历史；建议：{outcome.hint}",
    ]


def test_a_final_answer_on_the_last_step_is_still_returned():
    responses = [calls(fake_call(f"call_{n}")) for n in range(1, MAX_STEPS)] + [final("done")]
    outcome, client, _, _ = run_fake(*responses)
    assert outcome == "done" and len(client.requests) == MAX_STEPS


def reference_tool_call_cap():
    """REFERENCE: "一次响应最多执行 32 个调用". The number comes from there, not from the script."""
    reference = (Path(lesson.__file__).parent / "REFERENCE.md").read_text(encoding="utf-8")
    (cap,) = re.findall(r"一次响应最多执行 (\d+) 个调用", reference)
    return int(cap)


def test_one_call_more_than_the_references_cap_stops_before_any_runs():
    cap = reference_tool_call_cap()
    many = [fake_call(f"call_{n}") for n in range(cap + 1)]
    outcome, client, messages, lines = run_fake(calls(*many), final())
    assert (outcome.link, outcome.exit_code, outcome.step) == ("Harness", 1, 1)
    assert f"{cap + 1}" in outcome.reason and f"{cap}" in outcome.hint
    assert messages == ONLY_THE_QUESTION and len(client.requests) == 1
    assert lines == ["step 1: finish_reason=tool_calls"]


def test_the_references_cap_itself_is_allowed():
    cap = reference_tool_call_cap()
    many = [fake_call(f"call_{n}") for n in range(cap)]
    outcome, _, messages, _ = run_fake(calls(*many), final())
    assert outcome == ANSWER
    assert sum(m["role"] == "tool" for m in messages) == cap


def test_provider_owned_fields_go_back_unchanged_and_other_private_fields_do_not():
    signature = {"google": {"thought_signature": "c2lnbmF0dXJl"}}
    details = [{"type": "reasoning.encrypted", "data": "b3BhcXVl", "index": 0}]
    first = fake_response(
        "tool_calls",
        tool_calls=[{**fake_call("call_1"), "extra_content": signature, "index": 0}],
        reasoning_content="思考：需要调用乘法",
        reasoning_details=details,
        reasoning="私有推理",
        refusal=None,
        audio=None,
        annotations=[],
    )
    _, client, messages, lines = run_fake(first, final())
    echoed = client.requests[1]["messages"][1]
    assert set(echoed) == {
        "role",
        "content",
        "tool_calls",
        "reasoning_content",
        "reasoning_details",
    }
    assert echoed["reasoning_content"] == "思考：需要调用乘法"
    assert echoed["reasoning_details"] == details
    assert echoed["tool_calls"] == [{**fake_call("call_1"), "extra_content": signature}]
    assert messages[1] == echoed  # the history holds what was sent back
    assert not any("思考" in line or "私有推理" in line or "b3Bh" in line for line in lines)


def test_an_empty_reasoning_content_still_goes_back():
    first = fake_response("tool_calls", tool_calls=[fake_call("call_1")], reasoning_content="")
    _, client, messages, _ = run_fake(first, final())
    assert client.requests[1]["messages"][1]["reasoning_content"] == ""
    assert messages[1]["reasoning_content"] == ""


INVISIBLE_ONLY = ["\u200b", "\ufeff\u200b\u2060", " \u200c\u200d\n", "\u00a0\u3000"]
THINK_ONLY = [
    "<think>3720</think>",
    "\n<think>答案是 3720</think>\n\n",
    "<think>没写完的推理",
    "<think>a</think><think>b</think>",
    "模板把开头的标签放进了提示，这里只剩推理</think>\n",
]


@pytest.mark.parametrize("content", [None, "", "  \n\t ", *INVISIBLE_ONLY, *THINK_ONLY])
def test_an_empty_final_answer_stops_the_loop_naming_the_model(content):
    outcome, client, messages, lines = run_fake(final(content), final())
    assert isinstance(outcome, AgentStop)
    assert (outcome.link, outcome.exit_code, outcome.step) == ("Model", 1, 1)
    assert "空回答" in outcome.reason
    assert last_event(outcome, messages) == "最后一个成功事件：step 1: 收到响应"
    assert messages == ONLY_THE_QUESTION and len(client.requests) == 1
    assert lines == ["step 1: finish_reason=stop"]


@pytest.mark.parametrize(
    "content",
    [
        f"<think>先算 248×15</think>\n\n{ANSWER}",
        f"先算 248×15（开头的标签在提示里）</think>\n\n{ANSWER}",
        f"<think>一</think>\n<think>二</think>\n{ANSWER}",
    ],
)
def test_the_printed_answer_leaves_the_reasoning_out_and_the_history_keeps_it(content):
    outcome, _, messages, _ = run_fake(final(content))
    assert outcome == ANSWER
    assert messages[-1] == {"role": "assistant", "content": content}


def test_a_refusal_stops_the_loop_and_shows_the_refusal():
    outcome, _, messages, _ = run_fake(fake_response("stop", refusal="I can't help with that."))
    assert isinstance(outcome, AgentStop)
    assert (outcome.link, outcome.exit_code) == ("Model", 1)
    assert "I can't help with that." in outcome.reason
    assert messages == ONLY_THE_QUESTION


# Smoke tests only: the rule for calls written as text (issues 29, 36) is tested in
# tests/test_written_calls.py. Here: run_agent refuses such a reply and does not keep it, and
# after a tool ran it keeps a reply that reports the call.
WRITTEN_CALL = '```json\n{"name": "multiply", "arguments": {"a": 248, "b": 15}}\n```'
WRAPPED_CALL = '<tool_call>\n{"name": "multiply", "arguments": {"a": 6, "b": 7}}\n</tool_call>'


def test_a_call_written_as_text_stops_the_loop_and_runs_nothing():
    outcome, client, messages, lines = run_fake(final(WRITTEN_CALL), final())
    assert isinstance(outcome, AgentStop) and not isinstance(outcome, RequestFailed)
    assert (outcome.link, outcome.exit_code, outcome.step) == ("Provider", 1, 1)
    assert '"multiply"' in outcome.reason  # what the model wrote is quoted
    assert messages == ONLY_THE_QUESTION and len(client.requests) == 1
    assert not any("call_id=" in line for line in lines)


def test_a_call_written_as_text_after_a_real_one_keeps_only_the_real_turn():
    outcome, client, messages, lines = run_fake(calls(fake_call("call_1")), final(WRAPPED_CALL))
    assert (outcome.link, outcome.exit_code, outcome.step) == ("Provider", 1, 2)
    assert last_event(outcome, messages) == "最后一个成功事件：step 2: 收到响应"
    assert [m["role"] for m in messages] == ["user", "assistant", "tool"]
    assert len(client.requests) == 2 and sum("call_id=" in line for line in lines) == 1


def test_after_a_real_call_a_reply_that_reports_it_is_the_answer_and_is_kept():
    report = "| multiply | a=248, b=15 | 3720 |"
    outcome, client, messages, _ = run_fake(calls(fake_call("call_1")), final(report))
    assert outcome == report and len(client.requests) == 2
    assert messages[-1] == {"role": "assistant", "content": report}


def test_pairing_problems_names_unanswered_and_unknown_results():
    ok = run_fake(calls(fake_call("call_1"), fake_call("call_2")), final())[2]
    assert pairing_problems(ok) == []
    assert pairing_problems(ok[:3]) == ["调用 'call_2' 没有结果"]
    stray = [ok[0], {"role": "tool", "tool_call_id": "call_9", "content": "{}"}]
    assert pairing_problems(stray) == ["结果 'call_9' 没有对应的调用"]
    twice = [*ok[:3], ok[2], *ok[3:]]
    assert pairing_problems(twice) == ["结果 'call_1' 没有对应的调用"]


@pytest.mark.parametrize(
    ("body", "text"),
    [
        ({"message": "m1", "type": "invalid_request_error"}, "m1"),
        ({"error": {"message": "m2"}}, "m2"),
        ({"error": "plain string"}, "plain string"),
        ([{"error": {"code": 400, "message": "m3"}}], "m3"),
        ({"code": 20015, "message": "m4", "data": None}, "m4"),
        ({"detail": "fastapi style"}, "fastapi style"),
        ({"error_msg": "baidu style"}, "baidu style"),
        ({"msg": "zhipu style"}, "zhipu style"),
        ({"base_resp": {"status_code": 1004, "status_msg": "minimax style"}}, "minimax style"),
        (
            {
                "error": {
                    "message": "Provider returned error",
                    "metadata": {"raw": '{"error": {"message": "upstream words"}}'},
                }
            },
            "upstream words",
        ),
    ],
)
def test_provider_words_reads_every_error_envelope(body, text):
    assert text in lesson.provider_words(body if isinstance(body, str) else json.dumps(body))


def test_an_html_error_page_has_no_words_and_is_quoted_as_it_is():
    page = "<html><head><title>502 Bad Gateway</title></head><body>x</body></html>"
    assert lesson.provider_words(page) == ""
    stop = lesson.provider_failure("HTTP 502：", 502, page)
    assert (stop.link, stop.exit_code) == ("Provider", 3)
    assert stop.reason == f"HTTP 502：{page}"


def test_a_huge_error_page_is_quoted_from_a_bounded_prefix():
    hostile = "<title>" * 40_000  # 280 KB
    assert lesson.provider_words(hostile) == ""
    stop = lesson.provider_failure("HTTP 502：", 502, hostile)  # no words: the body is quoted
    assert (stop.link, stop.exit_code) == ("Provider", 3)
    assert "<title>" in stop.reason and len(stop.reason) < 300


def test_an_empty_body_has_no_words_and_is_still_described():
    assert lesson.provider_words("") == ""
    stop = lesson.provider_failure("HTTP 500：", 500, "")
    assert stop.reason.startswith("HTTP 500：") and stop.reason != "HTTP 500："


# --- whatever a provider sends, run_agent answers or raises AgentStop; nothing else ---------

odd_text = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["\ud800", "\x1b[2J", "\x9b31m", "call_1", "multiply", "", " "]),
)
odd_value = st.one_of(
    st.none(), st.booleans(), st.integers(), odd_text, st.lists(odd_text, max_size=2)
)
odd_arguments = st.one_of(odd_value, st.just('{"a":248,"b":15}'), st.just('{"a":true,"b":15}'))


def maybe_keys(**fields):
    """Dicts in which each key may be present (with a drawn value) or missing."""
    return st.fixed_dictionaries({}, optional=fields)


odd_function = st.one_of(
    odd_value, maybe_keys(name=st.one_of(st.just("multiply"), odd_value), arguments=odd_arguments)
)
odd_call = st.one_of(
    odd_value,
    maybe_keys(
        id=st.one_of(st.sampled_from(["call_1", "call_2"]), odd_value),
        type=st.one_of(st.just("function"), odd_value),
        function=odd_function,
        extra_content=odd_value,
    ),
)
odd_message = st.one_of(
    odd_value,
    maybe_keys(
        role=st.just("assistant"),
        content=odd_value,
        tool_calls=st.one_of(odd_value, st.lists(odd_call, max_size=3)),
        reasoning_content=odd_value,
        refusal=odd_value,
    ),
)
odd_reason = st.one_of(
    st.sampled_from(["stop", "tool_calls", "length", "content_filter"]), odd_value
)
odd_choice = st.one_of(
    odd_value, maybe_keys(message=odd_message, finish_reason=odd_reason, error=odd_value)
)
odd_response = st.one_of(
    odd_value,
    maybe_keys(choices=st.one_of(odd_value, st.lists(odd_choice, min_size=1, max_size=2))),
)


def mostly(common, rare):
    """Draw `common` three times in four. (one_of would flatten `rare`'s many branches and draw
    each of them as often as `common`.)"""
    return st.sampled_from([common] * 3 + [rare]).flatmap(lambda strategy: strategy)


# Replies the gate lets through, with odd values where the protocol allows any: most draws, so
# that runs go on past step 1 and reach the loop's own rules
good_call = st.builds(
    fake_call,
    call_id=mostly(st.sampled_from(["call_1", "call_2", "functions.multiply:0"]), odd_text),
    arguments=mostly(st.sampled_from(['{"a":248,"b":15}', '{"a":true,"b":15}']), odd_text),
    name=mostly(st.just("multiply"), odd_text),
)
readable_response = st.builds(
    fake_response,
    finish_reason=mostly(st.sampled_from(["stop", "tool_calls"]), odd_reason),
    content=mostly(st.sampled_from([None, "", ANSWER]), odd_text),
    tool_calls=mostly(
        st.lists(good_call, min_size=1, max_size=3), st.one_of(st.none(), st.just([]))
    ),
)
any_response = mostly(readable_response, odd_response)


def terminal_safe(line):
    """No control characters (C0, DEL, C1) and no lone surrogates."""
    return all(unicodedata.category(char) not in ("Cc", "Cs") for char in line)


def with_reasoning(reasoning_content):
    call = fake_call("call_1")
    return fake_response("tool_calls", tool_calls=[call], reasoning_content=reasoning_content)


@settings(max_examples=300, deadline=None)
@given(responses=st.lists(any_response, min_size=MAX_STEPS, max_size=MAX_STEPS))
@example(responses=[with_reasoning("\ud800")] + [final()] * (MAX_STEPS - 1))
@example(responses=[with_reasoning(["not", "text"])] + [final()] * (MAX_STEPS - 1))
@example(responses=[calls(fake_call("c1"), fake_call("c2"))] * 2 + [final()] * (MAX_STEPS - 2))
@example(responses=[{"choices": {"0": 1}}] * MAX_STEPS)
def test_any_provider_output_ends_in_an_answer_or_an_agent_stop(responses):
    outcome, client, messages, lines = run_fake(*responses)
    assert isinstance(outcome, (str, AgentStop))
    assert 1 <= len(client.requests) <= MAX_STEPS
    mask = lesson.secret_mask({})
    for line in lines:  # what reaches a person passes the mask: printed safely, whatever came
        assert terminal_safe(mask(line))
    # the next request can be sent: JSON without NaN, text without lone surrogates
    json.dumps(messages, ensure_ascii=False, allow_nan=False).encode()
    assert pairing_problems(messages) == []
    if isinstance(outcome, AgentStop):
        assert outcome.link in {"Harness", "Provider", "Model"}
        assert outcome.exit_code == (3 if isinstance(outcome, RequestFailed) else 1)
        assert all(terminal_safe(mask(line)) for line in reported(outcome, messages))
        assert last_event(outcome, messages).startswith("最后一个成功事件：")
    # every step that was not refused wrote one assistant message; the refused one wrote none
    steps_kept = len(client.requests) - (
        isinstance(outcome, AgentStop) and outcome.step is not None
    )
    assert sum(m["role"] == "assistant" for m in messages) == steps_kept
