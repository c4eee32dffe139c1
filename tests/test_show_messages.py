"""Rule 7: what is never shown stays never shown, and every stop can be inspected.

Reasoning (a leading think block with or without its opening tag, reasoning_content,
reasoning_details) is hidden from --show-messages exactly as from the answer; after every kind of
stop --show-messages prints the response that was refused; a field that stops the loop is named;
content given as a list of text parts is an answer. main() in-process, real SDK, real HTTP."""

import json

import pytest

import lesson_03_tool_calling_loop as lesson
from tests.provider_server import OMIT, Reply, completion, tool_call
from tests.runs import run_in_process

pytestmark = pytest.mark.usefixtures("quick_sdk_retries")
KEY = "sk-show-messages-0123456789"
ARGS = '{"a":248,"b":15}'
REASONING = "这是推理：先调用乘法"  # must never reach the screen
REFUSED = "被拒收、没有写进历史的响应"


@pytest.fixture
def run(provider, capsys):
    def runner(*args):
        env = {"OPENAI_API_KEY": KEY, "OPENAI_MODEL": "m", "OPENAI_BASE_URL": provider.base_url}
        return run_in_process(capsys, env, "--show-messages", *args)

    return runner


def tool_turn(*calls, **extra):
    return completion(tool_calls=list(calls), finish_reason="tool_calls", **extra)


def printed_history(result):
    text = result.out.split(REFUSED)[0]
    return json.loads(text[text.index("\n[") + 1 :] if not text.startswith("[") else text)


def refused_response(result):
    after = result.out.split(REFUSED, 1)[1]
    return json.loads(after[after.index("{") :])


@pytest.mark.parametrize(
    "content",
    [
        f"<think>{REASONING}</think>\n\n3720",
        f"{REASONING}</think>\n\n3720",  # Qwen3 / DeepSeek-R1 templates open it in the prompt
        f"<think>{REASONING}</think><think>再想想</think>3720",
    ],
    ids=["think-block", "without-opening-tag", "two-blocks"],
)
def test_leading_reasoning_is_hidden_from_the_history_as_from_the_answer(run, provider, content):
    provider.script(completion(content=content))
    result = run()
    assert result.code == 0 and "Agent> 3720\n" in result.out, result.everything
    assert REASONING not in result.everything
    assert printed_history(result)[-1]["content"] == "<think>（已省略）</think>3720"


def test_reasoning_fields_are_hidden_but_sent_back(run, provider):
    details = [{"type": "reasoning.text", "text": REASONING}]
    first = tool_turn(
        tool_call("call_1", "multiply", ARGS),
        reasoning_content=REASONING,
        reasoning_details=details,
    )
    provider.script(first, completion(content="3720"))
    result = run()
    assert result.code == 0 and REASONING not in result.everything
    history = printed_history(result)
    assert history[1]["reasoning_content"] == history[1]["reasoning_details"] == "（已省略）"
    sent = provider.requests[1].body["messages"][1]
    assert (sent["reasoning_content"], sent["reasoning_details"]) == (REASONING, details)


# Each kind of stop, with the field or reason the first line must name
STOPS = {
    "cut off by length": (completion(content="248 乘以", finish_reason="length"), '"length"'),
    "unknown finish_reason": (completion(content="3720", finish_reason="eos"), '"eos"'),
    "empty answer": (completion(content=""), "空回答"),
    "refusal": (completion(content=None, refusal="I can't"), "拒绝"),
    "call written as text": (completion(content='{"name": "multiply", "arguments": {}}'), "文字"),
    "content has an image part": (
        completion(content=[{"type": "image_url", "image_url": {"url": "x"}}]),
        "content",
    ),
    "call without type": (tool_turn(tool_call("call_1", "multiply", ARGS, type=OMIT)), "type"),
    "call without arguments": (
        tool_turn(tool_call("call_1", "multiply", OMIT)),
        "function.arguments",
    ),
    "arguments as an object": (
        tool_turn(
            {"id": "call_1", "type": "function", "function": {"name": "multiply", "arguments": {}}}
        ),
        "function.arguments",
    ),
    "duplicate ids": (
        tool_turn(tool_call("c", "multiply", ARGS), tool_call("c", "multiply", ARGS)),
        "id",
    ),
    "200 with only an error": ({"error": {"message": "upstream crashed"}}, "upstream crashed"),
    "content parts that are bare text": (completion(content=["3720"]), "content"),
    "a content part that is null": (completion(content=[None]), "content"),
    "content as one part, not a list": (
        completion(content={"type": "text", "text": "3720"}),
        "content",
    ),
    "error metadata that is text": (
        {"error": {"message": "upstream crashed", "metadata": "not an object"}},
        "upstream crashed",
    ),
}


@pytest.mark.parametrize(("reply", "named"), STOPS.values(), ids=STOPS.keys())
def test_every_kind_of_stop_names_the_cause_and_shows_the_refused_response(
    run, provider, reply, named
):
    provider.script(reply)
    result = run()
    first = result.err.splitlines()[0]
    assert result.code == 1 and named in first, result.everything
    assert printed_history(result) == [{"role": "user", "content": lesson.DEFAULT_QUESTION}]
    refused = refused_response(result)
    expected = reply if isinstance(reply, dict) and "choices" not in reply else reply["choices"][0]
    shown = refused if "choices" not in refused else refused["choices"][0]
    for key in ("finish_reason", "error"):  # what came is what is shown
        if key in expected:
            assert shown.get(key) == expected[key]


def test_a_request_failure_has_no_refused_response_to_show(run, provider):
    provider.script(Reply(status=400, json={"error": {"message": "bad request"}}))
    result = run()
    assert result.code == 3 and REFUSED not in result.out


def test_content_as_a_list_of_text_parts_is_an_answer_and_goes_back_unchanged(run, provider):
    parts = [{"type": "text", "text": "我来算。"}]
    final = [{"type": "text", "text": "248 乘以 15 "}, {"type": "text", "text": "等于 3720。"}]
    provider.script(
        tool_turn(tool_call("call_1", "multiply", ARGS), content=parts), completion(content=final)
    )
    result = run()
    assert result.code == 0, result.everything
    assert "Agent> 248 乘以 15 等于 3720。\n" in result.out
    assert provider.requests[1].body["messages"][1]["content"] == parts  # unchanged
    assert printed_history(result)[-1]["content"] == final


def test_thinking_parts_are_reasoning(run, provider):
    thinking = {"type": "thinking", "thinking": [{"type": "text", "text": REASONING}]}
    provider.script(completion(content=[thinking, {"type": "text", "text": "3720"}]))
    result = run()
    assert result.code == 0 and "Agent> 3720\n" in result.out
    assert REASONING not in result.everything
