"""run_agent() against SDK-shaped fakes: the message sequence and every stop-the-loop rule."""

import io
import json
import re
import threading
import time
import unicodedata
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import lesson_03_tool_calling_loop as lesson
from lesson_03_tool_calling_loop import MAX_STEPS, AgentStop, fake_call, fake_response, run_fake
from tests.runs import pairing_problems

RESULT_3720 = '{"status":"completed","result":3720}'


def final(content="248 乘以 15 等于 3720。"):
    return fake_response("stop", content=content)


def calls(*tool_calls):
    return fake_response("tool_calls", tool_calls=list(tool_calls))


def reported(stop, messages):
    """The two lines report() prints for a stop: [link] step N: reason / last event and hint."""
    printed = io.StringIO()
    lesson.report(stop, {}, messages, file=printed)
    return printed.getvalue().splitlines()


def last_event(stop, messages):
    """The last successful event, as report() derives it from the history."""
    _, second = reported(stop, messages)
    return second.split("；建议：")[0]


def test_happy_path_prints_the_articles_step_lines(capsys):
    client = lesson.FakeClient(calls(fake_call("call_1")), final())
    messages = []
    answer = lesson.run_agent(client, "m", "帮我算一下 248 乘以 15", messages)
    assert answer == "248 乘以 15 等于 3720。"
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
        {"role": "assistant", "content": "248 乘以 15 等于 3720。"},
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
    assert outcome == "248 乘以 15 等于 3720。"
    assert len(client.requests) == 3
    first_result = json.loads(client.requests[1]["messages"][2]["content"])
    assert first_result["status"] == "error"
    assert messages[4] == {"role": "tool", "tool_call_id": "call_2", "content": RESULT_3720}


def test_unknown_tool_goes_back_to_the_model():
    _, client, _, _ = run_fake(calls(fake_call("call_1", name="rm_rf")), final("不能这样做"))
    result = json.loads(client.requests[1]["messages"][2]["content"])
    assert result["status"] == "error" and "rm_rf" in result["message"]


def odd_call(**fields):
    base = {"id": "call_1", "type": "function", "function": fake_call("x").function}
    base.update(fields)
    return SimpleNamespace(**{k: v for k, v in base.items() if v is not MISSING})


MISSING = object()

STOP_CASES = {
    "tool calls with length": (
        fake_response("length", tool_calls=[fake_call("c", '{"a":2')]),
        "Model",
    ),
    "tool calls with a null finish_reason": (
        fake_response(None, tool_calls=[fake_call("c")]),
        "Provider",
    ),
    "tool calls with content_filter": (
        fake_response("content_filter", tool_calls=[fake_call("c")]),
        "Provider",
    ),
    "tool calls with null reason": (fake_response(None, tool_calls=[fake_call("c")]), "Provider"),
    "tool_calls reason, empty list": (fake_response("tool_calls", tool_calls=[]), "Provider"),
    "tool_calls reason, no list": (fake_response("tool_calls", tool_calls=None), "Provider"),
    "missing id": (calls(odd_call(id=MISSING)), "Provider"),
    "null id": (calls(fake_call(None)), "Provider"),
    "empty id": (calls(fake_call("")), "Provider"),
    "numeric id": (calls(fake_call(7)), "Provider"),
    "duplicate ids": (calls(fake_call("c1"), fake_call("c1", '{"a":6,"b":7}')), "Provider"),
    "missing function": (calls(odd_call(function=MISSING)), "Provider"),
    "null function": (calls(odd_call(function=None)), "Provider"),
    "custom tool type": (calls(odd_call(type="custom")), "Provider"),
    "function without arguments": (
        calls(odd_call(function=SimpleNamespace(name="multiply"))),
        "Provider",
    ),
    "arguments is an object": (
        calls(odd_call(function=SimpleNamespace(name="multiply", arguments={"a": 248, "b": 15}))),
        "Provider",
    ),
    "name is null": (
        calls(odd_call(function=SimpleNamespace(name=None, arguments='{"a":248,"b":15}'))),
        "Provider",
    ),
    "second call unpairable": (calls(fake_call("call_1"), fake_call("")), "Provider"),
    "tool_calls is not a list": (fake_response("tool_calls", tool_calls={"id": "c"}), "Provider"),
    "final with length": (fake_response("length", content="248 乘以 15 等"), "Model"),
    "final with content_filter": (fake_response("content_filter", content=""), "Provider"),
    "no choices": (SimpleNamespace(choices=[]), "Provider"),
    "choices is null": (SimpleNamespace(choices=None), "Provider"),
    "choice without message": (
        SimpleNamespace(choices=[SimpleNamespace(finish_reason="stop")]),
        "Provider",
    ),
    "html page": ("<html><title>Welcome to nginx!</title></html>", "Provider"),
    "http 200 error body": (SimpleNamespace(error={"message": "upstream down"}), "Provider"),
}
STOP_CASES.update(
    {
        f"final with {reason!r}": (fake_response(reason, content="3720"), "Provider")
        for reason in [
            "error",
            "sensitive",
            "network_error",
            "eos",
            "model_length",
            "",
            None,
            "STOP",
        ]
    }
)


@pytest.mark.parametrize(("response", "link"), STOP_CASES.values(), ids=STOP_CASES.keys())
def test_untrustworthy_responses_stop_the_loop_before_anything_runs(response, link):
    outcome, client, messages, lines = run_fake(response)
    assert isinstance(outcome, AgentStop)
    assert (outcome.link, outcome.exit_code, outcome.step) == (link, 1, 1)
    assert last_event(outcome, messages) == "最后一个成功事件：step 1: 收到响应"
    assert outcome.refused is response  # --show-messages shows what was refused, after every stop
    assert len(client.requests) == 1
    assert messages == [{"role": "user", "content": lesson.DEFAULT_QUESTION}]
    assert not any("call_id=" in line for line in lines)


@pytest.mark.parametrize("reason", ["length", "eos", "", None, "sensitive"])
def test_the_stop_line_names_the_finish_reason(reason):
    outcome, _, _, lines = run_fake(fake_response(reason, content="x"))
    assert json.dumps(reason) in outcome.reason
    assert lines == [f"step 1: finish_reason={reason or json.dumps(reason)}"]


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b'{"error": {"message": "upstream down", "code": 502}}', "upstream down"),
        (b"<html><head><title>Login - Web UI</title></head></html>", "Login - Web UI"),
    ],
)
def test_the_provider_words_of_a_choiceless_200_body_are_shown(body, words):
    # The bytes of an HTTP 200 become a response in one place; without choices it is the
    # provider's failure, exit 3, quoting what it said
    with pytest.raises(AgentStop) as caught:
        lesson.read_response(body)
    stop = caught.value
    assert (stop.link, stop.exit_code) == ("Provider", 3)
    assert words in stop.reason


def test_an_openrouter_error_inside_the_choice_stops_the_loop_with_its_words():
    response = final("")
    response.choices[0].error = {"message": "upstream model timed out", "code": 502}
    outcome, client, messages, _ = run_fake(response, final())
    assert (outcome.link, outcome.exit_code, outcome.step) == ("Provider", 1, 1)
    assert "upstream model timed out" in outcome.reason
    assert len(client.requests) == 1 and len(messages) == 1


def test_a_later_stop_reports_the_last_successful_event():
    outcome, client, messages, _ = run_fake(calls(fake_call("call_1")), fake_response("length"))
    assert len(client.requests) == 2
    assert outcome.step == 2
    assert outcome.refused is not None
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
            return calls(fake_call("call_1"))
        raise AgentStop("SDK/网络", "连不上服务器", "检查端点", lesson.EXIT_REQUEST_FAILED)


def test_a_request_that_fails_refuses_nothing_and_the_last_event_is_the_tool_result():
    messages = []
    with pytest.raises(AgentStop) as caught:
        lesson.run_agent(FailsOnSecondRequest(), "m", "q", messages)
    stop = caught.value
    assert (stop.step, stop.refused, stop.exit_code) == (2, None, 3)
    first, second = reported(stop, messages)
    assert first.startswith("[SDK/网络] step 2: ")
    assert second.startswith("最后一个成功事件：call_1 的 Tool Result 已写入历史；")


def test_a_first_request_that_fails_reports_only_the_user_message():
    messages = []
    client = failing_client(AgentStop("SDK/网络", "连不上服务器", "检查端点", 3))
    with pytest.raises(AgentStop) as caught:
        lesson.run_agent(client, "m", "q", messages)
    assert (caught.value.step, caught.value.refused) == (1, None)
    assert (
        last_event(caught.value, messages)
        == "最后一个成功事件：Harness 已就绪，user 消息已写入历史"
    )


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


def test_reasoning_content_is_echoed_and_other_private_fields_are_not():
    first = calls(fake_call("call_1"))
    message = first.choices[0].message
    message.reasoning_content = "思考：需要调用乘法"
    message.reasoning, message.refusal, message.audio = "私有推理", None, None
    _, client, _, lines = run_fake(first, final())
    echoed = client.requests[1]["messages"][1]
    assert set(echoed) == {"role", "content", "tool_calls", "reasoning_content"}
    assert echoed["reasoning_content"] == "思考：需要调用乘法"
    assert not any("思考" in line or "私有推理" in line for line in lines)


def test_an_empty_reasoning_content_still_goes_back():
    first = calls(fake_call("call_1"))
    first.choices[0].message.reasoning_content = ""
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
    outcome, _, messages, lines = run_fake(final(content))
    assert isinstance(outcome, AgentStop)
    assert (outcome.link, outcome.reason, outcome.step) == ("Model", "模型返回了空回答", 1)
    assert messages == [{"role": "user", "content": lesson.DEFAULT_QUESTION}]
    assert lines == ["step 1: finish_reason=stop"]


@pytest.mark.parametrize(
    "content",
    [
        "<think>先算 248×15</think>\n\n248 乘以 15 等于 3720。",
        "先算 248×15（开头的标签在提示里）</think>\n\n248 乘以 15 等于 3720。",
        "<think>一</think>\n<think>二</think>\n248 乘以 15 等于 3720。",
    ],
)
def test_the_printed_answer_leaves_the_reasoning_out_and_the_history_keeps_it(content):
    outcome, _, messages, _ = run_fake(final(content))
    assert outcome == "248 乘以 15 等于 3720。"
    assert messages[-1] == {"role": "assistant", "content": content}


def test_a_refusal_stops_the_loop_and_shows_the_refusal():
    response = final(None)
    response.choices[0].message.refusal = "I can't help with that."
    outcome, *_ = run_fake(response)
    assert isinstance(outcome, AgentStop) and outcome.link == "Model"
    assert outcome.reason == "模型拒绝回答：I can't help with that."


# A reply stops as "a call written as text" by one of two rules. Rule 1: chat-template control
# markup anywhere in it (special tokens, or a call tag followed by a call), after stripping stray
# end tokens at the end. Rule 2: the whole reply (after a leading think block and one surrounding
# code fence) is, or begins as, a JSON object naming a function with its arguments, or a call of
# the offered tool written as multiply(...).
CALLS_WRITTEN_AS_TEXT = {
    "fenced json (recording 01)": '```json\n{"name": "multiply", "arguments": {"a": 248}}\n```',
    "bare json (recording 02's shape)": '{"name": "multiply", "arguments": {"a": 37, "b": 41}}',
    "made-up tool": '{"name": "calculator", "arguments": {"expression": "248*15"}}',
    "arguments first": '{"arguments": {"a": 2, "b": 3}, "name": "multiply"}',
    "parameters key": '{"name": "multiply", "parameters": {"a": 2, "b": 3}}',
    "arguments as a json string": '{"name":"multiply","arguments":"{\\"a\\":2}"}',
    "a json list": '[{"name": "multiply", "arguments": {"a": 2, "b": 3}}]',
    "unfenced after spaces": '\n   {"name":"multiply","arguments":{"a":2}}',
    "fence without language": '```\n{"name": "multiply", "arguments": {}}\n```',
    "tilde fence": '~~~json\n{"name": "multiply", "arguments": {}}\n~~~',
    "openai shape": '{"type": "function", "function": {"name": "multiply", "arguments": "{}"}}',
    "function as a string": '{"function": "multiply", "arguments": {"a": 248, "b": 15}}',
    "tool_calls wrapper": '{"tool_calls": [{"name": "multiply", "arguments": {"a": 1}}]}',
    "command-r style": '```json\n[{"tool_name": "multiply", "parameters": {"a": 1}}]\n```',
    "llama pythonic list": "[multiply(a=248, b=15)]",
    # Gemma's documented form: a list of pythonic calls in a tool_code fence
    # (ai.google.dev/gemma/docs/capabilities/function-calling)
    "gemma tool_code fence": "```tool_code\n[multiply(a=248, b=15)]\n```",
    "tool_call fence": "```tool_call\nmultiply(a=248, b=15)\n```",
    # the offered tool's name(...) alone is a call, not an answer (rule 2)
    "the offered tool called alone": "multiply(248, 15)",
    "call then a closing tag": '{"name": "multiply", "arguments": {}}</tool_call>',
    "call then an end token": '{"name": "multiply", "arguments": {}}<|im_end|>',
    "after a think block": '<think>用乘法</think>\n{"name": "multiply", "arguments": {"a": 2}}',
    "after an unopened think block": '先想想</think>{"name": "multiply", "arguments": {"a": 2}}',
    # Qwen2.5-Coder-1.5B on its GGUF's own template, llama-server, 2026-12-02 (1 run of 6): the
    # template's {{ }} leaked around the call
    "doubled braces (real)": '{{"name": "multiply", "arguments": {"a": 12, "b": 34}}}}',
    # Issue 23, from the real Qwen2.5-Coder model: the call never closed
    "unclosed call (issue 23, real)": '{"name": "你好", "arguments": {"text": "你好"',
    # Qwen2.5-Coder-1.5B on its GGUF's own template, asked 你好 (tests/recordings/12): a tool
    # never offered, null arguments, in a json fence
    "null arguments in a fence (real)": '```json\n{\n  "name": "hello",\n'
    '  "arguments": null\n}\n```',
    # the same run (tests/recordings/13): two opening braces, one closing brace too many
    "extra closing brace (real)": '{{"name": "hello", "arguments": {}}}}',
}
# a fenced call the model never closed (the fence ends with the reply): the shape of recording 01,
# cut where a model that stops early would stop
CALLS_WRITTEN_AS_TEXT["unclosed fence"] = '```json\n{"name": "multiply", "arguments": {"a": 248}}'
CALL_TAG_TEXTS = {  # rule 1: chat-template markup, at the start or after a line of prose
    "qwen tag": '<tool_call>{"name": "multiply", "arguments": {}}',
    "qwen tag on its own lines": '<tool_call>\n{"name": "multiply", "arguments": {"a": 2}}\n'
    "</tool_call>",
    # ollama/ollama model/parsers/qwen3_test.go fixture: prose straight before the tag
    "prose then qwen/hermes tag": 'Let me think<tool_call>{"name":"get_weather","arguments":'
    '{"location":"San Francisco","unit":"celsius"}}</tool_call>',
    "granite token": '<|tool_call|>{"name": "multiply", "arguments": {}}',
    "llama 3 python_tag": '<|python_tag|>{"name": "multiply", "parameters": {}}',
    "mistral tag": '[TOOL_CALLS][{"name": "multiply", "arguments": {}}]',
    # mistral-common, tokenizer v11: [TOOL_CALLS]name[ARGS]{...}
    "mistral v11": '[TOOL_CALLS]multiply[ARGS]{"a":2,"b":3}',
    "llama 3.1 function tag": '<function=multiply>{"a": 2, "b": 3}</function>',
    # gpt-oss Harmony markup (NVIDIA/TensorRT-LLM#9256, lablup/mlxcel#654)
    "harmony call": "<|channel|>commentary to=functions.multiply <|constrain|>json<|message|>"
    '{"a":248,"b":15}<|call|>',
    "harmony message": '<|channel|>commentary<|message|>{"a":248,"b":15}<|end|>',
    # rule 1 holds anywhere in the reply: a control token in prose is a leak too
    "harmony token in prose": "gpt-oss 的回答用 <|channel|> 分隔通道。248 乘以 15 等于 3720。",
    # DeepSeek's own special tokens leaking into content
    "deepseek tokens": "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>multiply\n"
    '```json\n{"a":248,"b":15}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
    # ollama/ollama model/parsers/deepseek3_test.go fixture (DeepSeek V3.1)
    "prose then deepseek v3.1 tokens": "I'll check the weather.<｜tool▁calls▁begin｜>"
    '<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"location":"Paris"}<｜tool▁call▁end｜>'
    "<｜tool▁calls▁end｜>",
    # DeepSeek V3.2 DSML (ochafik/minja#11)
    "deepseek v3.2 dsml": '<｜DSML｜function_calls>\n<｜DSML｜invoke name="get_datetime">\n'
    '<｜DSML｜parameter name="timezone" string="true">Asia/Shanghai</｜DSML｜parameter>\n'
    "</｜DSML｜invoke>\n</｜DSML｜function_calls>",
    # Kimi K2's section tokens after a line of prose (NousResearch/hermes-agent#24534)
    "prose then kimi k2 tokens": "I'll multiply them.<|tool_calls_section_begin|>"
    "<|tool_call_begin|>functions.multiply:0<|tool_call_argument_begin|>"
    '{"a":248,"b":15}<|tool_call_end|><|tool_calls_section_end|>',
    # MiniMax-M2 docs/tool_calling_guide.md, with its line of prose
    "minimax-m2 with prose": "Let me help you query the weather.\n<minimax:tool_call>\n"
    '<invoke name="get_weather">\n<parameter name="location">San Francisco</parameter>\n'
    '<parameter name="unit">celsius</parameter>\n</invoke>\n</minimax:tool_call>',
    # GLM-4.5-Air on ik_llama.cpp (ikawrakow/ik_llama.cpp discussion #753): note the space
    # between the function name and <arg_key>
    "glm with prose (real)": "Let me search for configuration files in the backend directory to "
    "help locate this information: <tool_call>ls <arg_key>dirPath</arg_key> "
    "<arg_value>backend</arg_value> </tool_call>",
}
CALLS_WRITTEN_AS_TEXT.update(CALL_TAG_TEXTS)


@pytest.mark.parametrize("text", CALLS_WRITTEN_AS_TEXT.values(), ids=CALLS_WRITTEN_AS_TEXT.keys())
def test_a_tool_call_written_as_text_stops_the_loop_and_runs_nothing(text):
    outcome, client, messages, _ = run_fake(final(text), final())
    assert isinstance(outcome, AgentStop)
    assert (outcome.link, outcome.exit_code, outcome.hint) == (
        "Provider",
        1,
        lesson.HINT_CALL_AS_TEXT,
    )
    assert outcome.reason.startswith("模型把调用写成了文字")
    # the report quotes what the model wrote (its start, whitespace folded to one line)
    written = text.split("</think>")[-1]  # a think block before the call is not quoted
    assert " ".join(written.split())[:40] in " ".join(outcome.reason.split())
    assert len(client.requests) == 1 and len(messages) == 1


# Plausible final answers, each printed as it came: asked-for JSON examples with prose around
# them, code, maths notation, function names in prose, call tags named in prose, a tool schema,
# a stray template token after the answer.
ORDINARY_ANSWERS = [
    "248 乘以 15 等于 3720。",
    "我用 multiply 算了一下：3720",
    '结果：{"a": 248, "b": 15, "result": 3720}',
    '{"result": 3720}',
    '{"name": "张三", "age": 30}',
    '{"name": "张三", "args": 1}',
    '{"name": "multiply", "arguments": {"a": 248, "b": 15}, "result": 3720}',
    '示例调用：{"name": "multiply", "arguments": {"a": 1, "b": 2}}，结果是 2。',
    '下面是一个调用的 JSON 示例：\n```json\n{"name": "multiply", "arguments": {"a": 2}}\n```',
    '```json\n{"name": "multiply", "arguments": {"a": 2}}\n```\n这就是调用的格式，我没有调用它。',
    '要计算 248 乘以 15：\n248 × 15 = 3720。\n{"name": "multiply", "arguments": {}}',
    '{"name": "multiply", "arguments": {"a": 2}}\n\n我会用这个工具来计算。',
    "```python\nprint(248 * 15)\n```\n答案是 3720。",
    "print(248 * 15)",
    "sqrt(2)",
    "`multiply(248, 15)` 返回 3720。",
    "f(x) 的值是 3，multiply(2, 3) 是 6。",
    "答案是 $248 \\times 15 = 3720$。",
    # a pythonic list, but not of the offered tool
    "[Product(a=248, b=15, value=3720)]",
    # call tags named in prose, not followed by a call
    "Qwen wraps each call in <tool_call> and </tool_call> tags.",
    "Qwen 的模板会把调用包在 <tool_call> 标签里；Mistral 用 [TOOL_CALLS]。248 乘以 15 等于 3720。",
    # tool schemas: "parameters" holds a JSON Schema, with or without a description
    '[{"type": "function", "function": {"name": "add", "description": "Add",'
    ' "parameters": {"type": "object", "properties": {}}}}]',
    '我的工具：\n{"name": "multiply", "description": "乘法", "parameters": {"type": "object"}}',
    '{"name": "multiply", "parameters": {"type": "object",'
    ' "properties": {"a": {"type": "integer"}}}}',
    '答案：\n{"result": 3720}',
    '```json\n{"result": 3720}\n```',
    "248 乘以 15 等于 3720。<|im_end|>",
    "3720<|eot_id|>",
    'Action: multiply\nAction Input: {"a": 248, "b": 15}',
    "[" * 5000,
    "[[[[[[" + "1" * 10 + "]]]]]]",
]


@pytest.mark.parametrize("text", ORDINARY_ANSWERS)
def test_an_answer_that_merely_mentions_json_or_multiply_is_final(text):
    outcome, _, messages, _ = run_fake(final(text))
    assert outcome == text
    assert messages[-1] == {"role": "assistant", "content": text}


PROSE = st.text(
    st.characters(
        blacklist_categories=("Cs",),
        blacklist_characters="<>[]{}()|｜`~\"'",
    ),
    max_size=40,
)
FRAGMENTS = st.sampled_from(
    [
        "<tool_call>",
        "</tool_call>",
        "<minimax:tool_call>",
        "<function=",
        "[TOOL_CALLS]",
        "[ARGS]",
        "<|im_end|>",
        "<|channel|>",
        "<|python_tag|>",
        "<｜tool▁calls▁begin｜>",
        "<｜DSML｜",
        "<think>",
        "</think>",
        "```json\n",
        "\n```",
        '{"name": "multiply", "arguments": ',
        '{"a": 248, "b": 15}',
        '"arguments": null',
        "multiply(",
        "[multiply(a=1",
        ")",
        "{",
        "}",
        "[",
        "]",
        '"',
        "\\",
        ",",
        ":",
        "\ud800",
        "{" * 3000,
        "[" * 3000,
        "248 乘以 15 等于 3720。",
    ]
)


@settings(max_examples=400, deadline=None)
@given(text=st.lists(st.one_of(PROSE, FRAGMENTS), max_size=10).map("".join))
@example(text="{" * 100_000)
@example(text='{"name": "multiply", "arguments": ' + "[" * 100_000)
def test_reading_any_reply_for_a_written_call_never_raises(text):
    assert lesson.looks_like_tool_call_text(text) in (True, False)


@settings(max_examples=300, deadline=None)
@given(
    sentence=PROSE.filter(lambda t: not t.lstrip().startswith(("{", "["))),
    number=st.integers(-(10**12), 10**12),
)
@example(sentence="multiply 的结果是 ", number=3720)
@example(sentence="", number=3720)
def test_a_sentence_and_a_number_is_never_a_written_call(sentence, number):
    assert lesson.looks_like_tool_call_text(f"{sentence}{number}") is False


def test_the_answer_corpus_is_large_enough_to_mean_something():
    assert len(ORDINARY_ANSWERS) >= 20 and len(CALLS_WRITTEN_AS_TEXT) >= 20


def readme_tool_call_cap():
    """REFERENCE: "一次响应最多执行 32 个调用". The number comes from there, not from the script."""
    readme = (Path(lesson.__file__).parent / "REFERENCE.md").read_text(encoding="utf-8")
    (cap,) = re.findall(r"一次响应最多执行 (\d+) 个调用", readme)
    return int(cap)


def test_one_call_more_than_readmes_cap_stops_before_any_runs():
    cap = readme_tool_call_cap()
    many = [fake_call(f"call_{n}") for n in range(cap + 1)]
    outcome, client, messages, lines = run_fake(calls(*many), final())
    assert isinstance(outcome, AgentStop) and outcome.link == "Harness"
    assert f"一次要执行 {cap + 1} 个调用" in outcome.reason
    assert f"上限是 {cap}" in outcome.hint
    assert len(messages) == 1 and len(client.requests) == 1
    assert lines == ["step 1: finish_reason=tool_calls"]


def test_readmes_cap_itself_is_allowed():
    cap = readme_tool_call_cap()
    many = [fake_call(f"call_{n}") for n in range(cap)]
    outcome, _, messages, _ = run_fake(calls(*many), final())
    assert outcome == "248 乘以 15 等于 3720。"
    assert sum(m["role"] == "tool" for m in messages) == cap


def test_length_hint_names_both_the_output_cap_and_the_context_window():
    outcome, *_ = run_fake(fake_response("length", content='```json\n{\n  "name": "multiply'))
    assert (outcome.link, outcome.hint) == ("Model", lesson.HINT_LENGTH)


def test_function_call_is_named_as_the_deprecated_openai_value():
    outcome, *_ = run_fake(fake_response("function_call", content=None))
    assert "已弃用" in outcome.reason and "不是 OpenAI 协议中的值" not in outcome.reason


def test_pairing_problems_names_unanswered_and_unknown_results():
    ok = run_fake(calls(fake_call("call_1"), fake_call("call_2")), final())[2]
    assert pairing_problems(ok) == []
    assert pairing_problems(ok[:3]) == ["调用 'call_2' 没有结果"]
    stray = [ok[0], {"role": "tool", "tool_call_id": "call_9", "content": "{}"}]
    assert pairing_problems(stray) == ["结果 'call_9' 没有对应的调用"]
    twice = [*ok[:3], ok[2], *ok[3:]]
    assert pairing_problems(twice) == ["结果 'call_1' 没有对应的调用"]


def failing_client(error):
    def create(**kwargs):
        raise error

    return SimpleNamespace(chat=SimpleNamespace(completions=SimpleNamespace(create=create)))


@pytest.mark.parametrize(
    "error", [IndexError("pop from empty list"), TypeError("bad"), KeyError("k")]
)
def test_an_exception_from_the_request_that_is_not_the_outside_world_is_not_translated(error):
    # Rule 4: only the SDK's own failures become reports; anything else is a bug to show
    with pytest.raises(type(error)) as caught:
        lesson.run_agent(failing_client(error), "m", "q")
    assert caught.value is error


@pytest.mark.parametrize(
    ("body", "text"),
    [
        ({"message": "m1", "type": "invalid_request_error"}, "m1"),
        ({"error": {"message": "m2"}}, "m2"),
        ({"error": "plain string"}, "plain string"),
        ([{"error": {"code": 400, "message": "m3"}}], "m3"),
        ({"code": 20015, "message": "m4", "data": None}, "m4"),
        (
            "<html><head><title>502 Bad Gateway</title></head><body>x</body></html>",
            "502 Bad Gateway",
        ),
        ("<p>no\n\ntitle</p>", "no title"),
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
    assert text in lesson.provider_words(body)


# --- whatever a provider sends, run_agent answers or raises AgentStop; nothing else ---------

odd_text = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["\ud800", "\x1b[2J", "\x9b31m", "call_1", "multiply", "", " "]),
)
odd_value = st.one_of(st.none(), st.integers(), odd_text, st.lists(odd_text, max_size=2))
odd_arguments = st.one_of(odd_value, st.just('{"a":248,"b":15}'), st.just('{"a":true,"b":15}'))
odd_call = st.builds(
    SimpleNamespace,
    id=odd_value,
    type=st.one_of(st.just("function"), odd_value),
    function=st.one_of(
        st.none(),
        st.builds(
            SimpleNamespace, name=st.one_of(st.just("multiply"), odd_value), arguments=odd_arguments
        ),
    ),
)
odd_message = st.one_of(
    st.none(),
    odd_text,
    st.builds(
        SimpleNamespace,
        content=odd_value,
        tool_calls=st.one_of(st.none(), st.lists(odd_call, max_size=3), odd_text),
        reasoning_content=st.one_of(st.none(), odd_text),
    ),
)
odd_reason = st.one_of(
    st.sampled_from(["stop", "tool_calls", "length", "content_filter"]), odd_value
)
odd_response = st.one_of(
    odd_value,
    st.builds(
        SimpleNamespace,
        choices=st.one_of(
            odd_value,
            st.lists(
                st.builds(SimpleNamespace, message=odd_message, finish_reason=odd_reason),
                min_size=1,
                max_size=2,
            ),
        ),
    ),
)


def unanswered_or_stray(messages):
    """Oracle: the tool messages after each assistant answer its calls, each once, in order."""
    problems, expected = [], []
    for message in [*messages, {"role": "end"}]:
        if message["role"] == "tool":
            if expected and message["tool_call_id"] == expected[0]:
                expected.pop(0)
            else:
                problems.append(("stray result", message["tool_call_id"]))
            continue
        problems += [("unanswered call", call_id) for call_id in expected]
        expected = [call["id"] for call in message.get("tool_calls", [])]
    return problems


def terminal_safe(line):
    """No control characters (C0, DEL, C1) and no lone surrogates."""
    return all(unicodedata.category(char) not in ("Cc", "Cs") for char in line)


def with_reasoning(reasoning_content):
    response = calls(fake_call("call_1"))
    response.choices[0].message.reasoning_content = reasoning_content
    return response


@settings(max_examples=300, deadline=None)
@given(responses=st.lists(odd_response, min_size=MAX_STEPS, max_size=MAX_STEPS))
@example(responses=[with_reasoning("\ud800")] + [final()] * (MAX_STEPS - 1))
@example(responses=[with_reasoning(["not", "text"])] + [final()] * (MAX_STEPS - 1))
@example(responses=[calls(fake_call("c1"), fake_call("c2"))] * 2 + [final()] * (MAX_STEPS - 2))
def test_any_provider_output_ends_in_an_answer_or_an_agent_stop(responses):
    outcome, client, messages, lines = run_fake(*responses)
    assert isinstance(outcome, (str, AgentStop))
    assert 1 <= len(client.requests) <= MAX_STEPS
    mask = lesson.secret_mask(set())
    for line in lines:  # what reaches a person passes the mask: printed safely, whatever came
        assert terminal_safe(mask(line))
    for message in messages:
        json.dumps(message, ensure_ascii=False).encode("utf-8")  # the next request can be sent
    assert unanswered_or_stray(messages) == []
    if isinstance(outcome, AgentStop):
        assert outcome.link in {"Harness", "Provider", "Model"}
        assert all(terminal_safe(mask(line)) for line in reported(outcome, messages))
        assert last_event(outcome, messages).startswith("最后一个成功事件：")


def test_a_hostile_error_page_is_read_from_a_bounded_prefix():
    hostile = "<title>" * 40_000  # 280 KB, no closing tag: quadratic with a naive regex
    assert lesson.provider_words(hostile) == ""
    assert "280000" in lesson.quoted(hostile)  # no words: the report describes the body instead
    late_title = "<p>" + "a" * 4000 + "</p><title>Late title</title>"
    assert lesson.provider_words(late_title).startswith("aaa")  # the title lies past the prefix
    unclosed = "<title>502 Bad Gateway" + " <p>" * 20_000
    assert lesson.provider_words(unclosed).startswith("502 Bad Gateway")


def test_an_empty_body_has_no_words_and_is_still_described():
    assert lesson.provider_words("") == ""
    assert lesson.quoted("").strip() and lesson.quoted("") != lesson.quoted("  x  ")


class SdkShaped:
    """Stands in for the SDK client: .chat.completions.with_raw_response.create(**request)
    returns an object whose .content is the body's bytes, or raises, or blocks until released."""

    def __init__(self, *outcomes, block=False):
        self.outcomes, self.requests, self.release = list(outcomes), [], threading.Event()
        self.block = block
        raw = SimpleNamespace(create=self.create)
        self.chat = SimpleNamespace(completions=SimpleNamespace(with_raw_response=raw))

    def create(self, **request):
        self.requests.append(request)
        if self.block:
            self.release.wait(30)
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return SimpleNamespace(content=outcome)


def online(sdk, deadline=5.0, progress=None):
    config = {"deadline": deadline, "base_url": "http://127.0.0.1:9/v1"}
    return lesson.OnlineClient(sdk, config, (), progress or (lambda text: None))


def completion_bytes(**message):
    finish = "tool_calls" if message.get("tool_calls") else "stop"
    choice = {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}
    body = {"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": [choice]}
    return json.dumps(body).encode()


def test_the_online_client_gives_up_on_a_request_that_never_finishes_at_the_deadline():
    sdk, shown = SdkShaped(b"late", block=True), []
    started = time.monotonic()
    try:
        with pytest.raises(AgentStop) as caught:
            online(sdk, deadline=0.2, progress=shown.append).chat.completions.create(model="m")
    finally:
        sdk.release.set()
    assert time.monotonic() - started < 5  # not the 30 s the request would have taken
    stop = caught.value
    assert (stop.link, stop.exit_code) == ("SDK/网络", 3)
    assert "0.2" in stop.reason and "OPENAI_TIMEOUT" in stop.hint
    assert shown[-1] == "" and any(shown)  # the waiting status was shown, then erased


def test_the_online_client_re_raises_a_harness_bug_from_inside_the_request_unchanged():
    error = ZeroDivisionError("a bug inside the request path")
    with pytest.raises(ZeroDivisionError) as caught:
        online(SdkShaped(error)).chat.completions.create(model="m")
    assert caught.value is error


def test_the_online_client_turns_completion_bytes_into_an_sdk_shaped_response():
    call = {"id": "call_1", "type": "function"}
    call["function"] = {"name": "multiply", "arguments": '{"a":248,"b":15}'}
    sdk = SdkShaped(completion_bytes(content=None, tool_calls=[call]))
    response = online(sdk).chat.completions.create(model="m", messages=[], tools=lesson.TOOLS)
    assert sdk.requests == [{"model": "m", "messages": [], "tools": lesson.TOOLS}]
    choice = response.choices[0]
    assert (choice.finish_reason, choice.message.content) == ("tool_calls", None)
    (read,) = choice.message.tool_calls
    assert (read.id, read.type, read.function.name) == ("call_1", "function", "multiply")
    assert read.function.arguments == '{"a":248,"b":15}'


def test_run_agent_through_the_online_client_reaches_the_answer(capsys):
    call = {"id": "call_1", "type": "function"}
    call["function"] = {"name": "multiply", "arguments": '{"a":248,"b":15}'}
    sdk = SdkShaped(
        completion_bytes(content=None, tool_calls=[call]),
        completion_bytes(content="248 乘以 15 等于 3720。"),
    )
    messages = []
    answer = lesson.run_agent(online(sdk), "m", "q", messages)
    assert answer == "248 乘以 15 等于 3720。"
    assert sdk.requests[1]["messages"][2] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": RESULT_3720,
    }
    assert messages[1]["content"] == ""  # null beside the calls is kept as ""
