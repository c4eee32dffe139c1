"""Rule 7: what is never shown stays never shown, and every stop can be inspected.

Reasoning (a leading think block with or without its opening tag, reasoning_content,
reasoning_details) is hidden from --show-messages exactly as from the answer. The history is
printed however the run ends (an answer, a stopped loop, a failed request, a reply of the wrong
shape; Ctrl-C in test_exit_codes); after a stop on a response the loop received, that refused
response is printed too; a field that stops the loop is named; a completion that is not
well-formed is the provider's failure (exit 3). Both show only the fields the lesson teaches
(an allowlist), any other field as （已省略）. main() in-process, real SDK, real HTTP."""

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
    "duplicate ids": (
        tool_turn(tool_call("c", "multiply", ARGS), tool_call("c", "multiply", ARGS)),
        "id",
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


# A 200 whose completion is not well-formed (content that is not text, a call without its type
# or arguments, an error inside choices[0]) is a reply the gate refuses: the provider's failure,
# exit 3, like an HTTP error. The loop refused no response, so none is shown.
MALFORMED = {
    "content has only an image part": completion(
        content=[{"type": "image_url", "image_url": {"url": "x"}}]
    ),
    "content as a list of text parts": completion(content=[{"type": "text", "text": "3720"}]),
    "content as one part, not a list": completion(content={"type": "text", "text": "3720"}),
    "call without type": tool_turn(tool_call("call_1", "multiply", ARGS, type=OMIT)),
    "call without arguments": tool_turn(tool_call("call_1", "multiply", OMIT)),
    "arguments as an object": tool_turn(
        {"id": "call_1", "type": "function", "function": {"name": "multiply", "arguments": {}}}
    ),
}


@pytest.mark.parametrize("reply", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_completion_is_a_provider_failure_with_nothing_refused(run, provider, reply):
    provider.script(reply)
    result = run()
    first = result.err.splitlines()[0]
    assert result.code == 3 and first.startswith("[Provider] step 1: "), result.everything
    assert printed_history(result) == [{"role": "user", "content": lesson.DEFAULT_QUESTION}]
    assert REFUSED not in result.out and len(provider.requests) == 1


# A 200 whose body is not a completion is the provider's failure, like an HTTP error: there is
# no response that the loop refused (the metadata that is text once crashed the reader)
NOT_A_COMPLETION = {
    "an error and no choices": {"error": {"message": "upstream crashed"}},
    "error metadata that is text": {
        "error": {"message": "upstream crashed", "metadata": "not an object"}
    },
    "minimax envelope": {"base_resp": {"status_code": 1008, "status_msg": "upstream crashed"}},
    "an error inside choices[0] (OpenRouter)": {
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


# The history is printed however the run ends, also when it ends after a tool turn
TOOL_TURN = tool_turn(tool_call("call_1", "multiply", ARGS))
RESULT_3720 = {"role": "tool", "tool_call_id": "call_1", "content": lesson.RESULT_3720}
AFTER_ONE_TOOL_TURN = [
    {"role": "user", "content": lesson.DEFAULT_QUESTION},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "multiply", "arguments": ARGS},
            }
        ],
    },
    RESULT_3720,
]


def test_a_stop_at_step_2_prints_the_history_so_far_and_the_refused_response(run, provider):
    provider.script(TOOL_TURN, completion(content="248 乘以 15 等", finish_reason="length"))
    result = run()
    assert (result.code, result.err_lines[0].startswith("[Model] step 2: ")) == (1, True)
    assert printed_history(result) == AFTER_ONE_TOOL_TURN
    refused = refused_response(result)["choices"][0]
    assert (refused["finish_reason"], refused["message"]["content"]) == ("length", "248 乘以 15 等")


def test_a_request_failing_at_step_2_prints_the_history_so_far_and_nothing_refused(run, provider):
    provider.script(TOOL_TURN, Reply(status=400, json={"error": {"message": "bad second turn"}}))
    result = run()
    assert (result.code, result.err_lines[0].startswith("[Provider] step 2: ")) == (3, True)
    assert printed_history(result) == AFTER_ONE_TOOL_TURN
    assert REFUSED not in result.out


# What the lesson teaches, written out here rather than taken from the script
TAUGHT = {"role", "content", "tool_calls", "tool_call_id", "id", "type", "function", "name"}
TAUGHT |= {"arguments", "choices", "message", "finish_reason"}


def untaught_values(value, path="$"):
    """Every (path, value) under a key the lesson does not teach whose value is shown."""
    if isinstance(value, list):
        return [found for i, item in enumerate(value) for found in untaught_values(item, path)]
    if not isinstance(value, dict):
        return []
    found = []
    for key, inner in value.items():
        if key not in TAUGHT and inner != OMITTED:
            found.append((f"{path}.{key}", inner))
        found += untaught_values(inner, f"{path}.{key}") if key in TAUGHT else []
    return found


def test_only_taught_fields_are_shown_in_the_history_and_the_refused_response(run, provider):
    extra = {"annotations": [], "audio": {"id": "audio_1"}, "reasoning": REASONING}
    call = tool_call("call_1", "multiply", ARGS, index=0, extra_content={"sig": SIGNATURE})
    first = tool_turn(call, reasoning_content=REASONING, **extra)
    first["choices"][0]["native_finish_reason"] = "TOOL_CALLS"
    cut = completion(content="248", finish_reason="length", **extra)
    cut.update(system_fingerprint="fp_1", service_tier="default")
    provider.script(first, cut)
    result = run()
    assert result.code == 1, result.everything
    history, refused = printed_history(result), refused_response(result)
    assert (untaught_values(history), untaught_values(refused)) == ([], [])
    assert SIGNATURE not in result.everything and REASONING not in result.everything
    # the untaught fields are there, written as omitted: the display hides, it does not drop
    assert (history[1]["reasoning_content"], refused["usage"]) == (OMITTED, OMITTED)
    assert history[1]["tool_calls"][0]["extra_content"] == OMITTED
    # and what the lesson teaches is shown as it came
    assert history[1]["tool_calls"][0]["function"] == {"name": "multiply", "arguments": ARGS}
    assert refused["choices"][0]["message"]["content"] == "248"
