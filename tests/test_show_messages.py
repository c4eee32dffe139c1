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
    # a part that is not text (an image, Mistral's reference chunk) carries no answer text
    "content has only an image part": (
        completion(content=[{"type": "image_url", "image_url": {"url": "x"}}]),
        "空回答",
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
    "an error inside choices[0] (OpenRouter)": (
        {
            "id": "gen-1",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": ""},
                    "finish_reason": "error",
                    "error": {"message": "upstream crashed", "code": 502},
                }
            ],
        },
        "upstream crashed",
    ),
    "content parts that are bare text": (completion(content=["3720"]), "content"),
    "a content part that is null": (completion(content=[None]), "content"),
    "content as one part, not a list": (
        completion(content={"type": "text", "text": "3720"}),
        "content",
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
    shown = refused_response(result)["choices"][0]  # what came is what is shown
    assert shown["finish_reason"] == reply["choices"][0]["finish_reason"]


# A 200 whose body is not a completion is the provider's failure, like an HTTP error: there is
# no response that the loop refused (the metadata that is text once crashed the reader)
NOT_A_COMPLETION = {
    "an error and no choices": {"error": {"message": "upstream crashed"}},
    "error metadata that is text": {
        "error": {"message": "upstream crashed", "metadata": "not an object"}
    },
    "minimax envelope": {"base_resp": {"status_code": 1008, "status_msg": "upstream crashed"}},
}


@pytest.mark.parametrize("body", NOT_A_COMPLETION.values(), ids=NOT_A_COMPLETION.keys())
def test_a_200_that_is_not_a_completion_quotes_the_provider_and_refuses_nothing(
    run, provider, body
):
    provider.script(body)
    result = run()
    first = result.err.splitlines()[0]
    assert result.code == 3 and first.startswith("[Provider] step 1: "), result.everything
    assert "upstream crashed" in first and '{"' not in first  # the words, not the envelope
    assert printed_history(result) == [{"role": "user", "content": lesson.DEFAULT_QUESTION}]
    assert REFUSED not in result.out


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


# The display is an allowlist: the fields the lesson teaches are shown, any other field's value
# is written as （已省略）, whoever invents it next. Signatures are opaque and secret-like.
SIGNATURE = "c2lnbmF0dXJlLW9wYXF1ZQ"
OMITTED = "（已省略）"


def test_fields_the_lesson_does_not_teach_are_omitted_from_a_refused_response(run, provider):
    # LiteLLM's shapes: thinking_blocks with a signature on the message, Gemini's thought
    # signature in provider_specific_fields on a call and on the response itself
    signed = {"thought_signature": SIGNATURE + "-call"}
    call = tool_call("call_1", "multiply", '{"a":248,"b', provider_specific_fields=signed)
    block = {"type": "thinking", "thinking": REASONING, "signature": SIGNATURE + "-block"}
    reply = completion(tool_calls=[call], finish_reason="length", thinking_blocks=[block])
    reply["provider_specific_fields"] = {"thought_signature": SIGNATURE + "-response"}
    provider.script(reply)
    result = run()
    assert result.code == 1, result.everything
    assert SIGNATURE not in result.everything and REASONING not in result.everything
    shown = refused_response(result)
    message = shown["choices"][0]["message"]
    shown_call = message["tool_calls"][0]
    assert (shown["provider_specific_fields"], message["thinking_blocks"]) == (OMITTED, OMITTED)
    assert shown_call["provider_specific_fields"] == OMITTED
    # what the lesson teaches stays readable
    assert (message["role"], shown_call["id"], shown_call["type"]) == (
        "assistant",
        "call_1",
        "function",
    )
    assert shown_call["function"] == {"name": "multiply", "arguments": '{"a":248,"b'}


def test_a_thinking_part_with_a_signature_is_omitted_from_the_history_and_sent_back(run, provider):
    thinking = {"type": "thinking", "thinking": REASONING, "signature": SIGNATURE}
    parts = [thinking, {"type": "text", "text": "我来算。"}]
    provider.script(
        tool_turn(tool_call("call_1", "multiply", ARGS), content=parts), completion(content="3720")
    )
    result = run()
    assert result.code == 0 and "Agent> 3720\n" in result.out, result.everything
    assert SIGNATURE not in result.everything and REASONING not in result.everything
    history = printed_history(result)
    assert history[1]["content"] == [
        {"type": "thinking", "thinking": OMITTED, "signature": OMITTED},
        {"type": "text", "text": "我来算。"},
    ]
    assert history[2] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": '{"status":"completed","result":3720}',
    }
    assert provider.requests[1].body["messages"][1]["content"] == parts  # sent back as it came
