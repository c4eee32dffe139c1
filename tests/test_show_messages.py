"""--show-messages: the history, however the run ends, showing only what the lesson teaches.

The history is printed after an answer, a stopped loop, a failed request, a reply of the wrong
shape, a bug or Ctrl-C. It shows the fields the lesson teaches (an allowlist); any other field,
such as reasoning_content or a provider's signature, is written as （已省略）, whoever invents it
next, while the request still sends it back as it came. A completion that is not well-formed is
the provider's failure (exit 3). main() in-process, real SDK, real HTTP."""

import json

import pytest

import lesson_03_tool_calling_loop as lesson
from tests.provider_server import OMIT, Reply, completion, tool_call
from tests.runs import run_in_process

pytestmark = pytest.mark.usefixtures("quick_sdk_retries")
KEY = "sk-show-messages-0123456789"
ARGS = '{"a":248,"b":15}'
REASONING = "这是推理：先调用乘法"  # a field the lesson does not teach: never on the screen
SIGNATURE = "c2lnbmF0dXJlLW9wYXF1ZQ"
OMITTED = "（已省略）"
ASKED = [{"role": "user", "content": lesson.DEFAULT_QUESTION}]


@pytest.fixture
def run(provider, capsys):
    def runner(*args):
        env = {"OPENAI_API_KEY": KEY, "OPENAI_MODEL": "m", "OPENAI_BASE_URL": provider.base_url}
        return run_in_process(capsys, env, "--show-messages", *args)

    return runner


def tool_turn(*calls, **extra):
    return completion(tool_calls=list(calls), finish_reason="tool_calls", **extra)


def printed_history(result):
    """The JSON after the step lines (and the answer): everything from the first line "["."""
    lines = result.out.splitlines()
    return json.loads("\n".join(lines[lines.index("[") :]))


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
    assert history[1]["reasoning_content"] == history[1]["reasoning_details"] == OMITTED
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
def test_every_kind_of_stop_names_the_cause_and_prints_the_history(run, provider, reply, named):
    provider.script(reply)
    result = run()
    first = result.err.splitlines()[0]
    assert result.code == 1 and named in first, result.everything
    finish_reason = json.dumps(reply["choices"][0]["finish_reason"]).strip('"')
    assert result.out.splitlines()[0] == f"step 1: finish_reason={finish_reason}", result.out
    assert printed_history(result) == ASKED  # the refused reply never entered the history


# A 200 whose completion is not well-formed (content that is not text, a call without its type
# or arguments) is a reply the gate refuses: the provider's failure, exit 3, like an HTTP error.
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
def test_a_malformed_completion_is_a_provider_failure_and_the_history_is_printed(
    run, provider, reply
):
    provider.script(reply)
    result = run()
    first = result.err.splitlines()[0]
    assert result.code == 3 and first.startswith("[Provider] step 1: "), result.everything
    assert printed_history(result) == ASKED and len(provider.requests) == 1


# A 200 whose body is not a completion is the provider's failure, like an HTTP error; the
# report quotes the provider's words, not its envelope (metadata that is text once crashed it)
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
def test_a_200_that_is_not_a_completion_quotes_the_provider_and_prints_the_history(
    run, provider, body
):
    provider.script(body)
    result = run()
    first = result.err.splitlines()[0]
    assert result.code == 3 and first.startswith("[Provider] step 1: "), result.everything
    assert "）：upstream crashed；端点 " in first  # the words are what is quoted
    assert printed_history(result) == ASKED


# The history is printed however the run ends, also when it ends after a tool turn
TOOL_TURN = tool_turn(tool_call("call_1", "multiply", ARGS))
RESULT_3720 = {"role": "tool", "tool_call_id": "call_1", "content": lesson.RESULT_3720}
AFTER_ONE_TOOL_TURN = [
    *ASKED,
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


def test_a_stop_at_step_2_prints_the_history_so_far(run, provider):
    provider.script(TOOL_TURN, completion(content="248 乘以 15 等", finish_reason="length"))
    result = run()
    assert (result.code, result.err_lines[0].startswith("[Model] step 2: ")) == (1, True)
    assert printed_history(result) == AFTER_ONE_TOOL_TURN


def test_a_request_failing_at_step_2_prints_the_history_so_far(run, provider):
    provider.script(TOOL_TURN, Reply(status=400, json={"error": {"message": "bad second turn"}}))
    result = run()
    assert (result.code, result.err_lines[0].startswith("[Provider] step 2: ")) == (3, True)
    assert printed_history(result) == AFTER_ONE_TOOL_TURN


def interrupted(call):
    raise KeyboardInterrupt  # the user presses Ctrl-C while the tool runs


def crashed(call):
    return 1 / 0  # a bug in (changed) code


@pytest.mark.parametrize(
    ("router", "code"), [(interrupted, 130), (crashed, 1)], ids=["ctrl-c", "harness-bug"]
)
def test_a_run_cut_short_prints_the_history_through_the_same_allowlist(
    run, provider, monkeypatch, router, code
):
    monkeypatch.setattr(lesson, "execute_tool", router)
    provider.script(tool_turn(tool_call("call_1", "multiply", ARGS), reasoning_content=REASONING))
    result = run()
    assert result.code == code and REASONING not in result.everything, result.everything
    asked, called, _ = AFTER_ONE_TOOL_TURN  # stopped inside the tool: no result yet
    assert printed_history(result) == [asked, {**called, "reasoning_content": OMITTED}]


# What the lesson teaches, written out here rather than taken from the script
TAUGHT = {"role", "content", "tool_calls", "tool_call_id", "id", "type", "function", "name"}
TAUGHT |= {"arguments", "choices", "message", "finish_reason"}


def untaught_values(value, path="$"):
    """Every (path, value) under a key the lesson does not teach whose value is shown."""
    if isinstance(value, list):
        return [found for item in value for found in untaught_values(item, path)]
    if not isinstance(value, dict):
        return []
    found = []
    for key, inner in value.items():
        if key not in TAUGHT and inner != OMITTED:
            found.append((f"{path}.{key}", inner))
        found += untaught_values(inner, f"{path}.{key}") if key in TAUGHT else []
    return found


def test_only_taught_fields_are_shown_in_the_history(run, provider):
    # Gemini's signature on a call (extra_content), LiteLLM's thinking_blocks and
    # provider_specific_fields, OpenAI's annotations and audio: fields the lesson never teaches
    extra = {"annotations": [], "audio": {"id": "audio_1"}, "reasoning": REASONING}
    block = {"type": "thinking", "thinking": REASONING, "signature": SIGNATURE + "-block"}
    signed = {"thought_signature": SIGNATURE + "-call"}
    call = tool_call(
        "call_1",
        "multiply",
        ARGS,
        index=0,
        extra_content={"google": signed},
        provider_specific_fields=signed,
    )
    first = tool_turn(call, reasoning_content=REASONING, thinking_blocks=[block], **extra)
    first["choices"][0]["native_finish_reason"] = "TOOL_CALLS"
    first["provider_specific_fields"] = {"thought_signature": SIGNATURE + "-response"}
    final = completion(content="3720", reasoning_details=[{"text": REASONING}], **extra)
    provider.script(first, final)
    result = run()
    assert result.code == 0, result.everything
    history = printed_history(result)
    assert untaught_values(history) == []
    assert SIGNATURE not in result.everything and REASONING not in result.everything
    # the untaught fields the provider needs back are there, written as omitted
    assert (history[1]["reasoning_content"], history[3]["reasoning_details"]) == (OMITTED, OMITTED)
    assert history[1]["tool_calls"][0]["extra_content"] == OMITTED
    # and what the lesson teaches is shown as it came
    assert history[1]["tool_calls"][0]["function"] == {"name": "multiply", "arguments": ARGS}
    assert history[3]["content"] == "3720"
