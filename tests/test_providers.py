"""Issue 12: the providers people use in 2025–2026, each played by a server that acts like it.

Gemini 3 and OpenRouter refuse the next request, with their own error bodies, when an opaque
field they sent does not come back unchanged; a Groq-like server refuses fields it never asked
for. So a script that drops, changes or adds a field fails here, not only one that forgets to
look. Every run is main() in-process: the real openai SDK over real HTTP on 127.0.0.1.
Where a shape comes from is noted beside it (issue threads; tests/recordings/README.md).
"""

import json

import pytest

import lesson_03_tool_calling_loop as lesson
from tests.provider_server import (
    OMIT,
    Reply,
    completion,
    gemini_error,
    openrouter_error,
    recording,
    refuse_unless,
    tool_call,
)
from tests.runs import run_in_process, sent_to_fake

KEY = "sk-providers-test-5e4d3c2b1a09"
ARGS = '{"a":248,"b":15}'
RESULT = '{"status":"completed","result":3720}'
ANSWER = "248 乘以 15 等于 3720。"
FINAL = completion(content=ANSWER)
CALL_1 = tool_call("call_1", "multiply", ARGS)
OMITTED = "（已省略）"  # how --show-messages shows a field that goes back but is not for people


@pytest.fixture
def run(provider, capsys):
    def runner(*args, **extra_env):
        env = {
            "OPENAI_API_KEY": KEY,
            "OPENAI_MODEL": "test-model",
            "OPENAI_BASE_URL": provider.base_url,
            "OPENAI_TIMEOUT": "5",
            **extra_env,
        }
        return run_in_process(capsys, env, *args)

    return runner


def assert_stopped(result, code, first_line_start):
    """The script's two-line failure report, with no traceback and no key."""
    assert result.code == code, result.everything
    lines = result.err.splitlines()
    assert len(lines) == 2, result.err
    assert lines[0].startswith(first_line_start), lines[0]
    assert "Traceback" not in result.everything and KEY not in result.everything


def article_lines(call_id, first_finish_reason="tool_calls"):
    return [
        f"step 1: finish_reason={first_finish_reason}",
        f"step 1: multiply call_id={call_id} result={RESULT}",
        "step 2: finish_reason=stop",
        f"Agent> {ANSWER}",
    ]


def echoed_assistant(provider):
    """The assistant message as the second request carried it back."""
    return provider.requests[1].body["messages"][1]


def shown_history(result):
    """The JSON history that --show-messages prints after the answer."""
    return json.loads(result.out[result.out.index("\n[") + 1 :])


# --- 1. Gemini 3: a tool call's extra_content goes back on that same call --------------------
# Shapes: noho/dayu-agent#45 (captured from generativelanguage.googleapis.com: short ids like
# "jm4owj31", the signature under extra_content.google); openai/openai-python#2763.

SIGNATURE = "Ct0JAePx/15YWYiOChUWg22Jdacc39qi6o0yd3G0lh7gs91kD+jNPHUii474kxf0NfB6KCYylGc7JSko="
GEMINI_CALL = tool_call(
    "jm4owj31", "multiply", ARGS, extra_content={"google": {"thought_signature": SIGNATURE}}
)
_, GEMINI_MISSING_SIGNATURE = recording("08-gemini-400-missing-thought-signature")
GEMINI_CORRUPTED_SIGNATURE = gemini_error("Corrupted thought signature.")  # massgen/MassGen#665


def gemini_turn(*calls, finish_reason="tool_calls"):
    body = completion(content=OMIT, tool_calls=list(calls), finish_reason=finish_reason)
    body["model"] = "gemini-3-flash-preview"
    return body


def gemini_checks(sent_calls):
    """Gemini's check of the next request: every call it signed comes back with that signature."""
    signed = {call["id"]: call["extra_content"] for call in sent_calls if "extra_content" in call}

    def problem_of(body):
        seen = set()
        for message in body["messages"]:
            for call in message.get("tool_calls") or []:
                if call.get("id") not in signed:
                    continue
                seen.add(call["id"])
                if "extra_content" not in call:
                    return GEMINI_MISSING_SIGNATURE
                if call["extra_content"] != signed[call["id"]]:
                    return GEMINI_CORRUPTED_SIGNATURE
        return None if seen == set(signed) else GEMINI_MISSING_SIGNATURE

    return problem_of


@pytest.mark.parametrize("finish_reason", ["tool_calls", "stop"])
def test_gemini_3_gets_its_thought_signature_back_on_the_same_call(run, provider, finish_reason):
    provider.script(
        gemini_turn(GEMINI_CALL, finish_reason=finish_reason),
        refuse_unless(gemini_checks([GEMINI_CALL]), FINAL),
    )
    result = run(OPENAI_MODEL="gemini-3-flash-preview")
    assert (result.code, result.err) == (0, ""), result.everything
    assert result.out.splitlines() == article_lines("jm4owj31", finish_reason)
    assert echoed_assistant(provider)["tool_calls"] == [GEMINI_CALL]  # exactly, nothing added
    assert provider.requests[1].body["messages"][2] == {
        "role": "tool",
        "tool_call_id": "jm4owj31",
        "content": RESULT,
    }
    assert SIGNATURE not in result.everything


def test_only_the_call_that_carried_a_signature_carries_one_back(run, provider):
    # Gemini signs only the first of parallel calls:
    # ai.google.dev/gemini-api/docs/thought-signatures
    calls = [GEMINI_CALL, tool_call("4fk2q9xz", "multiply", '{"a":6,"b":7}')]
    provider.script(gemini_turn(*calls), refuse_unless(gemini_checks(calls), FINAL))
    result = run(OPENAI_MODEL="gemini-3-flash-preview")
    assert result.code == 0, result.everything
    assert echoed_assistant(provider)["tool_calls"] == calls


# --- 2. OpenRouter: reasoning_details go back on the assistant message, unchanged -------------
# Shapes: OpenRouterTeam/typescript-sdk#120 (reasoning.encrypted blocks, tool_<name>_<id> ids);
# openrouter.ai/docs "reasoning-tokens#preserving-reasoning-blocks"; refusal: recording 09.

DETAILS = [
    {
        "type": "reasoning.encrypted",
        "data": "CiIBjz1rX6JFJeOzncCWE77fuzv4qy/VO75KdXfoG0hh4qiiCnIBjz1rX6JbdjtlPWt4oJU6vFQ=",
        "id": "tool_multiply_U2ZJEE46KT9PuS0ZAsbt",
        "format": "google-gemini-v1",
        "index": 0,
    }
]
OPENROUTER_CALL = tool_call("tool_multiply_U2ZJEE46KT9PuS0ZAsbt", "multiply", ARGS)
OPENROUTER_REASONING = "用户想知道 248 乘以 15，先调用 multiply。"
_, OPENROUTER_MISSING_DETAILS = recording("09-openrouter-400-reasoning-details-missing")
OPENROUTER_CORRUPTED = openrouter_error(  # massgen/MassGen#665
    '{\n  "error": {\n    "code": 400,\n    "message": "Corrupted thought signature.",\n'
    '    "status": "INVALID_ARGUMENT"\n  }\n}\n'
)


def openrouter_turn():
    body = completion(
        content=None,
        tool_calls=[OPENROUTER_CALL],
        finish_reason="tool_calls",
        refusal=None,
        reasoning=OPENROUTER_REASONING,
        reasoning_details=DETAILS,
    )
    body.update(model="google/gemini-3-flash-preview", provider="Google AI Studio")
    body["choices"][0]["native_finish_reason"] = "STOP"
    return body


def openrouter_checks(body):
    """OpenRouter's check: each assistant tool turn carries its reasoning_details, unchanged."""
    for message in body["messages"]:
        if message["role"] != "assistant" or not message.get("tool_calls"):
            continue
        if "reasoning_details" not in message:
            return OPENROUTER_MISSING_DETAILS
        if message["reasoning_details"] != DETAILS:
            return OPENROUTER_CORRUPTED
    return None


def test_openrouter_gets_reasoning_details_back_unchanged_and_nothing_else(run, provider):
    provider.script(openrouter_turn(), refuse_unless(openrouter_checks, FINAL))
    result = run(OPENAI_MODEL="google/gemini-3-flash-preview")
    assert (result.code, result.err) == (0, ""), result.everything
    assert result.out.splitlines() == article_lines(OPENROUTER_CALL["id"])
    assert echoed_assistant(provider) == {  # `reasoning` and `refusal` stay out
        "role": "assistant",
        "content": "",
        "tool_calls": [OPENROUTER_CALL],
        "reasoning_details": DETAILS,
    }
    assert DETAILS[0]["data"] not in result.everything
    assert OPENROUTER_REASONING not in result.everything


# --- 3. Only what a provider requires goes back; nothing opaque is printed ---------------------
# Groq rejects fields it does not know on an echoed assistant message: karthink/gptel#774,
# janhq/jan#8136 ("property 'reasoning' is unsupported").

ASSISTANT_KEYS, CALL_KEYS = {"role", "content", "tool_calls"}, {"id", "type", "function"}


def groq_checks(body):
    for n, message in enumerate(body["messages"]):
        if message["role"] != "assistant":
            continue
        extra = sorted(set(message) - ASSISTANT_KEYS)
        extra += sorted(k for c in message.get("tool_calls") or [] for k in set(c) - CALL_KEYS)
        if extra:
            where = f"'messages.{n}'"
            words = (
                f"{where} : for 'role:assistant' the following must be satisfied"
                f"[({where} : property '{extra[0]}' is unsupported, did you mean 'role'?)]"
            )
            return Reply(
                status=400, json={"error": {"message": words, "type": "invalid_request_error"}}
            )
    return None


PRIVATE = {
    "private fields": (
        {
            "reasoning": "私有的推理文字",
            "refusal": None,
            "annotations": [],
            "audio": None,
            "function_call": None,
        },
        {"index": 0},
    ),
    "required fields that came as null": (
        {"reasoning_details": None, "reasoning_content": None},
        {"extra_content": None},
    ),
}


@pytest.mark.parametrize(("message_extra", "call_extra"), PRIVATE.values(), ids=PRIVATE.keys())
def test_fields_no_provider_requires_stay_out(run, provider, message_extra, call_extra):
    call = {**CALL_1, **call_extra}
    reply = completion(content=None, tool_calls=[call], finish_reason="tool_calls", **message_extra)
    provider.script(reply, refuse_unless(groq_checks, FINAL))
    result = run()
    assert (result.code, result.err) == (0, ""), result.everything
    assert echoed_assistant(provider) == {
        "role": "assistant",
        "content": "",
        "tool_calls": [CALL_1],
    }
    assert "私有" not in result.everything


# --- The fakes refuse what the real providers refuse, so the tests above cannot pass by accident

BARE_GEMINI_CALL = {k: v for k, v in GEMINI_CALL.items() if k != "extra_content"}
CHANGED_SIGNATURE = {"google": {"thought_signature": SIGNATURE[:-4] + "AA=="}}
CHANGED_DETAILS = [{**DETAILS[0], "data": DETAILS[0]["data"][:-4] + "AAA="}]
FAKES = {
    "gemini: signature missing": (
        gemini_checks([GEMINI_CALL]),
        BARE_GEMINI_CALL,
        {},
        "Function call is missing a thought_signature",
    ),
    "gemini: signature changed": (
        gemini_checks([GEMINI_CALL]),
        {**GEMINI_CALL, "extra_content": CHANGED_SIGNATURE},
        {},
        "Corrupted thought signature.",
    ),
    "gemini: as it came": (gemini_checks([GEMINI_CALL]), GEMINI_CALL, {}, None),
    "openrouter: details missing": (
        openrouter_checks,
        OPENROUTER_CALL,
        {},
        "Gemini models require OpenRouter reasoning details",
    ),
    "openrouter: details changed": (
        openrouter_checks,
        OPENROUTER_CALL,
        {"reasoning_details": CHANGED_DETAILS},
        "Corrupted thought signature.",
    ),
    "openrouter: as they came": (
        openrouter_checks,
        OPENROUTER_CALL,
        {"reasoning_details": DETAILS},
        None,
    ),
    "groq: reasoning echoed": (
        groq_checks,
        CALL_1,
        {"reasoning": "私有的推理文字"},
        "property 'reasoning' is unsupported",
    ),
    "groq: call index echoed": (
        groq_checks,
        {**CALL_1, "index": 0},
        {},
        "property 'index' is unsupported",
    ),
    "groq: only the standard fields": (groq_checks, CALL_1, {}, None),
}


@pytest.mark.parametrize(("check", "call", "extra", "refused"), FAKES.values(), ids=FAKES.keys())
def test_the_fake_providers_refuse_what_the_real_ones_refuse(provider, check, call, extra, refused):
    assistant = {"role": "assistant", "content": "", "tool_calls": [call], **extra}
    tool = {"role": "tool", "tool_call_id": call["id"], "content": RESULT}
    messages = [{"role": "user", "content": lesson.DEFAULT_QUESTION}, assistant, tool]
    provider.script(refuse_unless(check, FINAL))
    refusal, response = sent_to_fake(provider, messages, KEY)
    if refused is None:
        assert refusal is None, refusal
        assert response.choices[0].message.content == ANSWER
    else:
        assert refusal is not None, "the fake accepted what the provider refuses"
        assert refused in refusal


OPAQUE = {
    "gemini extra_content": (
        lambda: (gemini_turn(GEMINI_CALL), refuse_unless(gemini_checks([GEMINI_CALL]), FINAL)),
        lambda assistant: assistant["tool_calls"][0]["extra_content"],
        SIGNATURE,
    ),
    "openrouter reasoning_details": (
        lambda: (openrouter_turn(), refuse_unless(openrouter_checks, FINAL)),
        lambda assistant: assistant["reasoning_details"],
        DETAILS[0]["data"],
    ),
}


@pytest.mark.parametrize(("replies", "field", "secret"), OPAQUE.values(), ids=OPAQUE.keys())
def test_show_messages_shows_opaque_fields_as_omitted(run, provider, replies, field, secret):
    provider.script(*replies())
    result = run("--show-messages")
    assert result.code == 0, result.everything
    history = shown_history(result)
    assert [m["role"] for m in history] == ["user", "assistant", "tool", "assistant"]
    assert field(history[1]) == OMITTED
    assert secret not in result.everything
    assert field(echoed_assistant(provider)) != OMITTED  # the provider still got the real value


# --- 4. Tool calls that end with "stop" run; other finish_reasons beside calls still do not ---
# OpenAI when tool_choice names a function (ENTERPILOT/GoModel#124);
# SGLang (sgl-project/sglang#2877).

STOP_SHAPES = {
    "openai, tool_choice named": completion(
        content=None,
        tool_calls=[tool_call("call_Wq2hR4sF0aB9cD8eF7gH6iJ5", "multiply", ARGS)],
        finish_reason="stop",
        refusal=None,
        annotations=[],
    ),
    "sglang": completion(
        content="",
        tool_calls=[tool_call("call_8b1d6f0e3c2a4e7f9d5b1c0a", "multiply", ARGS, index=0)],
        finish_reason="stop",
    ),
}


@pytest.mark.parametrize("reply", STOP_SHAPES.values(), ids=STOP_SHAPES.keys())
def test_tool_calls_with_stop_run(run, provider, reply):
    call_id = reply["choices"][0]["message"]["tool_calls"][0]["id"]
    provider.script(reply, FINAL)
    result = run()
    assert (result.code, result.err) == (0, ""), result.everything
    assert result.out.splitlines() == article_lines(call_id, "stop")
    assert len(provider.requests) == 2
    assert provider.requests[1].body["messages"][2] == {
        "role": "tool",
        "tool_call_id": call_id,
        "content": RESULT,
    }


@pytest.mark.parametrize(
    "reason", ["length", "content_filter", "function_call", None, "eos", "tool_use"]
)
def test_tool_calls_with_other_finish_reasons_still_run_nothing(run, provider, reason):
    provider.script(completion(tool_calls=[CALL_1], finish_reason=reason), FINAL)
    result = run()
    assert_stopped(result, 1, "[")
    shown = reason if reason else json.dumps(reason)
    assert result.out.splitlines() == [f"step 1: finish_reason={shown}"]
    assert f"finish_reason={json.dumps(reason)}" in result.err.splitlines()[0]
    assert len(provider.requests) == 1


# --- 5. gpt-oss Harmony markup is a call written as text, not an answer -----------------------

HARMONY = {
    "commentary to=functions, <|call|>": (  # issue 12; waybarrios/vllm-mlx#50
        '<|channel|>commentary to=functions.multiply <|constrain|>json<|message|>{"a":248,"b":15}'
        "<|call|>"
    ),
    "commentary, <|end|> (TensorRT-LLM#9256)": (  # NVIDIA/TensorRT-LLM#9256, content verbatim
        '<|channel|>commentary<|message|>{\n  "path": "/",\n  "name_pattern": "*Chen*",\n'
        '  "type_filter": "file"\n}<|end|>'
    ),
    "analysis, then the call (mlxcel#654)": (  # lablup/mlxcel#654
        "<|channel|>analysis<|message|>要算 248 乘以 15，调用 multiply。<|end|><|start|>assistant"
        '<|channel|>commentary to=functions.multiply <|constrain|>json<|message|>{"a":248,"b":15}'
        "<|call|>"
    ),
    # rule 1: template control markup anywhere means the server did not parse (or leaked) its
    # template, even with prose around it
    "inside prose": "gpt-oss 的调用以 <|channel|> 开头、以 <|call|> 结尾。248 乘以 15 等于 3720。",
}


@pytest.mark.parametrize("content", HARMONY.values(), ids=HARMONY.keys())
def test_harmony_markup_is_a_call_written_as_text(run, provider, content):
    provider.script(completion(content=content, finish_reason="stop"), FINAL)
    result = run(OPENAI_MODEL="gpt-oss-20b")
    assert_stopped(result, 1, "[Provider] step 1: 模型把调用写成了文字")
    assert "tool-call parser" in result.err.splitlines()[1]  # the fix is server-side
    assert result.out.splitlines() == ["step 1: finish_reason=stop"]
    assert len(provider.requests) == 1


def test_an_answer_that_names_call_tags_without_a_call_is_still_an_answer(run, provider):
    # <tool_call> and [TOOL_CALLS] count only when a call follows them
    text = "Qwen 把调用包在 <tool_call> 标签里；Mistral 用 [TOOL_CALLS]。248 乘以 15 等于 3720。"
    provider.script(completion(content=text))
    result = run()
    assert (result.code, result.err) == (0, ""), result.everything
    assert result.out.splitlines() == ["step 1: finish_reason=stop", f"Agent> {text}"]


# --- 5b. A real 1.5B model behind the GGUF's own template writes calls as text ----------------
# Recordings 12-13 (tests/recordings/README.md): llama-server, Qwen2.5-Coder-1.5B-Instruct, the
# GGUF's chat template, 2026-12-02. Neither names an offered tool; both are calls, not answers.

STOCK_TEMPLATE_CALLS = [
    "12-stock-template-fenced-call-arguments-null",
    "13-stock-template-call-extra-closing-brace",
]


@pytest.mark.parametrize("name", STOCK_TEMPLATE_CALLS)
def test_a_real_models_call_written_as_text_stops_the_turn(run, provider, name):
    _, reply = recording(name)
    provider.script(reply, FINAL)
    result = run(OPENAI_MODEL="qwen2.5-coder-1.5b")
    assert_stopped(result, 1, "[Provider] step 1: ")
    assert "tool-call parser" in result.err.splitlines()[1]  # the fix is server-side
    assert result.out.splitlines() == ["step 1: finish_reason=stop"]  # no Agent> line
    assert len(provider.requests) == 1


# --- 6. Think blocks in content (MiniMax M2.x: anomalyco/opencode#3555) -----------------------

THINK_FINAL = "<think>\n用户要算 248 乘以 15，工具已经返回 3720，可以作答了。\n</think>\n\n"
THINK_CALL = "<think>\n用户要算 248 乘以 15，调用 multiply。\n</think>\n\n"


def test_a_think_block_is_left_out_of_the_printed_answer(run, provider):
    provider.script(
        completion(content=THINK_CALL, tool_calls=[CALL_1], finish_reason="tool_calls"),
        completion(content=THINK_FINAL + ANSWER),
    )
    result = run(OPENAI_MODEL="MiniMax-M2")
    assert (result.code, result.err) == (0, ""), result.everything
    assert result.out.splitlines() == article_lines("call_1")
    assert "工具已经返回" not in result.out and "<think>" not in result.out


def test_content_beside_tool_calls_goes_back_with_its_think_block_unchanged(run, provider):
    provider.script(
        completion(content=THINK_CALL, tool_calls=[CALL_1], finish_reason="tool_calls"), FINAL
    )
    result = run(OPENAI_MODEL="MiniMax-M2")
    assert result.code == 0, result.everything
    assert echoed_assistant(provider)["content"] == THINK_CALL
    assert "调用 multiply" not in result.everything


@pytest.mark.parametrize(
    "content",
    ["<think>\n只是在想。\n</think>", "<think>只是在想。</think>\n\n  "],
    ids=["think only", "think and blank lines"],
)
def test_content_that_is_only_a_think_block_is_an_empty_answer(run, provider, content):
    provider.script(completion(content=content))
    result = run()
    assert_stopped(result, 1, "[Model] step 1: ")
    assert "空回答" in result.err.splitlines()[0]
    assert "Agent>" not in result.out


@pytest.mark.parametrize(
    "call_text",
    [
        "[multiply(a=248, b=15)]",
        '<tool_call>{"name": "multiply", "arguments": {"a": 248, "b": 15}}',
    ],
    ids=["pythonic call", "tool_call tag without its end"],
)
def test_a_call_written_as_text_after_a_think_block_is_still_a_call(run, provider, call_text):
    provider.script(completion(content=THINK_CALL + call_text), FINAL)
    result = run()
    assert_stopped(result, 1, "[Provider] step 1: ")
    assert "Agent>" not in result.out and len(provider.requests) == 1


# --- 7. The provider's words hidden in envelopes ----------------------------------------------


def test_an_openrouter_4xx_shows_the_upstream_words(run, provider):
    provider.script(OPENROUTER_MISSING_DETAILS)  # recording 09, as OpenRouter sent it
    result = run()
    assert_stopped(result, 3, "[Provider] step 1: HTTP 400")
    assert "Gemini models require OpenRouter reasoning details" in result.err.splitlines()[0]


def test_the_upstream_words_are_clipped_and_safe(run, provider):
    raw = f"upstream refused: \x1b[31mkey {KEY} is not valid\x1b[0m " + "x" * 5000
    provider.script(openrouter_error(raw))
    result = run()
    assert_stopped(result, 3, "[Provider] step 1: HTTP 400")
    first = result.err.splitlines()[0]
    assert "upstream refused:" in first and "is not valid" in first
    assert "\x1b" not in result.everything and len(first) < 600


OVERLOADED = "The model is overloaded. Please try again later."
CHOICE_ERRORS = {
    "no content": {"content": None},
    "partial content": {"content": "248 乘以"},
    "beside a tool call": {"content": None, "tool_calls": [CALL_1]},
}


@pytest.mark.parametrize("message", CHOICE_ERRORS.values(), ids=CHOICE_ERRORS.keys())
def test_an_openrouter_200_with_an_error_in_the_choice_shows_its_words(run, provider, message):
    body = completion(finish_reason="error", **message)
    body["choices"][0].update(
        native_finish_reason="error", error={"code": 502, "message": OVERLOADED}
    )
    provider.script(body, FINAL)
    result = run()
    assert_stopped(result, 3, "[Provider] step 1: ")  # no reply came back: a request failure
    assert OVERLOADED in result.err.splitlines()[0]
    assert "Agent>" not in result.out and "call_id=" not in result.out
    assert len(provider.requests) == 1
