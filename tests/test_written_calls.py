"""Issue 29: a call written as text is an order for an offered tool, in any template's syntax.

The syntaxes below are taken from the raw model outputs that inference engines' tool-call
parsers read (the parser named beside each family); the strings are ours, with the lesson's
call multiply(a=248, b=15). Each family is refused alone, after a line of prose and, where
the family has a parallel form, with two calls. The near misses are answers and must print.
"""

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lesson_03_tool_calling_loop as lesson

RECORDINGS = Path(__file__).resolve().parent / "recordings"
J = '{"name": "multiply", "arguments": {"a": 248, "b": 15}}'
J2 = '{"name": "multiply", "arguments": {"a": 6, "b": 7}}'
P = '{"name": "multiply", "parameters": {"a": 248, "b": 15}}'
ARGS = '{"a": 248, "b": 15}'

# (family, one call, two calls or None); the parser it comes from is named above each row
# (vllm ... = vllm/entrypoints/openai/tool_parsers)
FAMILIES = [
    # vllm .../tool_parsers/hermes_tool_parser.py; llama.cpp common/chat.cpp (Hermes 2 Pro)
    (
        "Hermes / Qwen2.5 / Qwen3",
        f"<tool_call>\n{J}\n</tool_call>",
        f"<tool_call>\n{J}\n</tool_call>\n<tool_call>\n{J2}\n</tool_call>",
    ),
    # vllm .../qwen3coder_tool_parser.py
    (
        "Qwen3-Coder",
        "<tool_call>\n<function=multiply>\n<parameter=a>\n248\n</parameter>\n"
        "<parameter=b>\n15\n</parameter>\n</function>\n</tool_call>",
        None,
    ),
    # vllm .../llama_tool_parser.py (JSON), llama.cpp common/chat.cpp (Llama 3.x)
    ("Llama 3.x JSON", P, f"{P}; {P}"),
    ("Llama 3.2 JSON then a sentence", f"{P} 这样就能算出结果。", None),
    ("Llama 3.1 python_tag", f"<|python_tag|>{P}", None),
    # vllm .../pythonic_tool_parser.py (Llama 4, Llama 3.2 pythonic)
    ("pythonic", "[multiply(a=248, b=15)]", "[multiply(a=248, b=15), multiply(a=6, b=7)]"),
    # vllm .../mistral_tool_parser.py
    ("Mistral v3", f"[TOOL_CALLS][{J}]", f"[TOOL_CALLS][{J}, {J2}]"),
    ("Mistral v11", f"[TOOL_CALLS]multiply[ARGS]{ARGS}", None),
    # vllm .../deepseekv3_tool_parser.py
    (
        "DeepSeek V3",
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>multiply\n"
        f"```json\n{ARGS}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        None,
    ),
    # vllm .../deepseekv31_tool_parser.py
    (
        "DeepSeek V3.1",
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>multiply<｜tool▁sep｜>"
        f"{ARGS}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        None,
    ),
    # vllm .../kimi_k2_tool_parser.py
    (
        "Kimi K2",
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.multiply:0"
        f"<|tool_call_argument_begin|>{ARGS}<|tool_call_end|><|tool_calls_section_end|>",
        None,
    ),
    # vllm .../glm4_moe_tool_parser.py
    (
        "GLM-4.5",
        "<tool_call>multiply\n<arg_key>a</arg_key>\n<arg_value>248</arg_value>\n"
        "<arg_key>b</arg_key>\n<arg_value>15</arg_value>\n</tool_call>",
        None,
    ),
    # vllm .../minimax_tool_parser.py (M1); also Jamba, Hunyuan use a <tool_calls> list
    (
        "MiniMax-M1",
        f"<tool_calls>\n[{J}]\n</tool_calls>",
        f"<tool_calls>\n[{J}, {J2}]\n</tool_calls>",
    ),
    # vllm .../minimax_m2_tool_parser.py
    (
        "MiniMax-M2",
        '<minimax:tool_call>\n<invoke name="multiply">\n<parameter name="a">248'
        '</parameter>\n<parameter name="b">15</parameter>\n</invoke>\n</minimax:tool_call>',
        None,
    ),
    # vllm .../granite_tool_parser.py
    ("Granite", f"<|tool_call|>[{J}]", f"<|tool_call|>[{J}, {J2}]"),
    # vllm .../phi4mini_tool_parser.py; FireFunction v2 in llama.cpp common/chat.cpp
    ("Phi-4-mini / FireFunction", f"functools[{J}]", f"functools[{J}, {J2}]"),
    # llama.cpp common/chat.cpp (Functionary v3.1 Llama 3.1, Functionary v3.2)
    ("Functionary v3.1", f"<function=multiply>{ARGS}</function>", None),
    ("Functionary v3.2", f">>>multiply\n{ARGS}", f">>>multiply\n{ARGS}\n>>>multiply\n{ARGS}"),
    # llama.cpp common/chat.cpp (Command R7B); Command R+ writes Action: and a fenced list
    (
        "Command R+",
        'Action: ```json\n[{"tool_name": "multiply", "parameters": {"a": 248, "b": 15}}]\n```',
        None,
    ),
    # Gemma: a tool_code fence around a Python call
    ("Gemma tool_code", "```tool_code\nprint(multiply(a=248, b=15))\n```", None),
    # xLAM (vllm .../xlam_tool_parser.py): a JSON list in a fence after prose
    ("xLAM", f"我来调用工具。\n```json\n[{J}]\n```", None),
    ("function_call tag", f"<function_call> {J}", None),
    ("function_calls tag", "<function_calls>multiply(a=248, b=15)</function_calls>", None),
    ("TOOLCALL (Nemotron)", f"<TOOLCALL>[{J}]</TOOLCALL>", None),
    # vllm .../openai_tool_parser.py (gpt-oss, Harmony)
    (
        "gpt-oss Harmony",
        f"<|channel|>commentary to=functions.multiply <|constrain|>json<|message|>{ARGS}<|call|>",
        None,
    ),
    # vllm .../seed_oss_tool_parser.py
    (
        "Seed-OSS",
        "<seed:tool_call>\n<function=multiply>\n<parameter=a>248</parameter>\n"
        "<parameter=b>15</parameter>\n</function>\n</seed:tool_call>",
        None,
    ),
    # Apriel (vllm .../apriel_tool_parser.py style): a tool_calls list after a tag
    ("Apriel", f"<tool_calls>[{J}]</tool_calls>", None),
]
PROSE = "好的，我来帮你计算。\n"
CASES = [(f"{name}: alone", one) for name, one, _ in FAMILIES]
CASES += [(f"{name}: after prose", PROSE + one) for name, one, _ in FAMILIES]
CASES += [(f"{name}: two calls", two) for name, _, two in FAMILIES if two]

# Decided here (REFERENCE explains why): refused although they look like answers
JUDGEMENT_CALLS = [
    (
        "a call with a result the model made up",
        '{"name":"multiply","arguments":{"a":248,"b":15},"result":3720}',
    ),
    ("an example in a fenced block", f"示例如下：\n```json\n{J}\n```"),
    ("a trailing control token", "248 乘以 15 等于 3720。<|im_end|>"),
]

NEAR_MISSES = [
    "248 乘以 15 等于 3720。",
    "The result of multiplying 248 by 15 is 3720.",
    "我用 multiply 工具算出 248 × 15 = 3720。",
    "multiply 返回了 3720，所以答案是 3720。",
    '{"result": 3720}',
    '{"answer": 3720, "question": "248 乘以 15"}',
    "| a | b | 积 |\n|---|---|---|\n| 248 | 15 | 3720 |",
    "```python\nprint(248 * 15)\n```\n结果是 3720。",
    "```python\na = 248\nb = 15\nprint(a * b)\n```",
    "`<tool_call>` 是 Qwen 模板里包住调用的标签，例如 "
    '`<tool_call>{"name": "multiply", "arguments": {"a": 2, "b": 3}}</tool_call>`。',
    "在 Python 里写 `multiply(a=248, b=15)` 就能得到 3720。",
    "multiply(248, 15) = 3720",
    "a = 248, b = 15, 所以结果是 3720。",
    "先把 a 设为 248，b 设为 15，相乘得到 3720。",
    '{"name": "multiply", "description": "Multiply two integers", "parameters": '
    '{"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}',
    "答案：3720（248 × 15）。",
    "Sure! 248 times 15 equals 3,720.",
    "3720 is the result of multiplying 248 by 15.",
    "你好！有什么我可以帮忙的吗？",
    "步骤：\n1. 248 × 10 = 2480\n2. 248 × 5 = 1240\n3. 2480 + 1240 = 3720",
    "这个工具叫 multiply，它接受两个整数参数 a 和 b。",
    "The function name is `multiply` and its arguments are `a` and `b`.",
    "<think>要不要调用工具？</think>\n248 乘以 15 等于 3720。",
]


def refused(text: str) -> bool:
    try:
        lesson.final_answer(lesson.SimpleNamespace(content=text, refusal=None))
    except lesson.AgentStop as stop:
        assert stop.link == lesson.PROVIDER and stop.exit_code == 1
        return True
    return False


@pytest.mark.parametrize("label, text", CASES + JUDGEMENT_CALLS, ids=lambda v: v[:40])
def test_a_call_written_in_any_templates_syntax_is_refused(label, text):
    assert refused(text), label


@pytest.mark.parametrize("text", NEAR_MISSES, ids=lambda v: v[:40])
def test_an_answer_that_names_the_tool_or_quotes_a_call_prints(text):
    assert not refused(text)


def test_the_corpus_covers_enough_families_and_near_misses():
    assert len(FAMILIES) >= 25 and len(NEAR_MISSES) >= 20


def test_the_order_rule_comes_from_tools_not_from_the_name_multiply(monkeypatch):
    # rename the offered tool: its name is an order now, the old one only prose
    tool = json.loads(json.dumps(lesson.TOOLS[0]))
    tool["function"]["name"] = "times"
    monkeypatch.setattr(lesson, "TOOLS", [tool])
    assert refused("<tool_call>times\n<arg_key>a</arg_key>\n<arg_value>248</arg_value>")
    assert not refused("<function_calls>multiply(a=248, b=15)</function_calls>")


def recorded_content(number: str) -> str:
    (path,) = RECORDINGS.glob(f"{number}-*.json")
    body = json.loads(path.read_text(encoding="utf-8"))["response"]["body"]
    reply = lesson.read_reply([json.dumps(body).encode()])
    return reply.choices[0].message.content


@pytest.mark.parametrize("number", ["01", "02", "12", "13"])
def test_recorded_calls_written_as_text_are_refused(number):
    assert refused(recorded_content(number))


@pytest.mark.parametrize("number", ["04", "11"])
def test_recorded_final_answers_print(number):
    assert not refused(recorded_content(number))


PROSE_WORDS = st.sampled_from(
    ["好的", "结果", "我来算", "The answer", "is", "3720", "乘以", "等于", "。", "，", "!", "\n"]
)
SENTENCE = st.lists(PROSE_WORDS, max_size=8).map(" ".join)


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from([one for _, one, _ in FAMILIES]),
    SENTENCE,
    SENTENCE,
    st.sampled_from(["", " ", "\n", "\n\n"]),
)
def test_property_a_family_call_among_any_prose_is_refused(call, before, after, gap):
    assert refused(f"{before}{gap}{call}{gap}{after}")


@settings(max_examples=150, deadline=None)
@given(
    SENTENCE,
    st.integers(-(10**6), 10**6),
    st.sampled_from(["", "multiply ", "用 multiply 算，", "`multiply(a=1, b=2)` "]),
    SENTENCE,
)
def test_property_a_plausible_answer_prints(before, number, mention, after):
    assert not refused(f"{before} {mention}结果是 {number}。{after}".strip() or "3720")
