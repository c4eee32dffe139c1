"""Issues 29 and 36: a call written as text, in any chat template's syntax; when it is an answer.

When a server does not parse the model's tool call, the call arrives as `message.content` with
finish_reason=stop. Part 3's written_orders() finds the orders in a reply (an offered tool's name
bound to one of its parameters, in any markup; a template's control token <|...|>; a reply that
starts with a JSON {"name": ..., "arguments": ...} call, whatever the name), and part 1's
final_answer() decides:
- no tool has run yet in this Turn: a reply holding an order stops the loop (AgentStop, link
  Provider, exit 1, nothing executed, no answer printed);
- a tool has run: the reply is the answer (exit 0), it most likely reports that call, unless
  nothing but the order is left once the orders are taken out (then it stops as before). When the
  printed answer holds an order, one line on stderr says it was not executed and quotes it.

The corpus (the specification of what an order is): the raw model outputs that the tool-call
parser tests of vLLM, SGLang and llama.cpp feed their parsers, one family per syntax. The syntax is
theirs (the file is named beside each family); the strings are ours, with the lesson's call
multiply(a=248, b=15). Each family is refused alone, after a line of prose and, where the family
has a parallel form, with two calls. Then the near misses: answers that name the tool, quote a tag,
show a table or code, and must print. Every corpus reply goes through run_agent() (part 2's
FakeClient, the real read_reply gate), so "refused" means the loop stopped with nothing run and
"prints" means run_agent returned the answer. Issue 36's promises go through main() over real HTTP
(exit code, the Agent> line, the note on stderr). The property tests call final_answer(), the check
run_agent makes, for speed.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import lesson_03_tool_calling_loop as lesson
from lesson_03_tool_calling_loop import AgentStop, RequestFailed, fake_response, fake_turn
from tests.provider_server import ARTICLE_TOOL_TURN, completion, recording, tool_call

RECORDINGS = Path(__file__).resolve().parent / "recordings"
QUESTION = [{"role": "user", "content": lesson.DEFAULT_QUESTION}]
RESULT_3720 = '{"status":"completed","result":3720}'
# The history after one good multiply round (part 2's fake_turn), before the reply under test
AFTER_A_TOOL = [
    *QUESTION,
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [lesson.fake_call("call_1")],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": RESULT_3720},
]
# The note run_online prints on stderr after an answer that holds an order: the promise is its
# start (issue 36), the rest quotes the orders
NOTE = "回答里写成文字的调用（或模板标记）没有执行"


# ---- how a reply is judged: one turn of run_agent ---------------------------------------------


@dataclass
class Turn:
    outcome: object  # the answer run_agent returned, or the AgentStop it raised
    requests: int
    messages: list
    lines: list

    @property
    def printed(self) -> bool:
        return isinstance(self.outcome, str)


def turn(content: str, question: str = lesson.DEFAULT_QUESTION, tool_ran: bool = False) -> Turn:
    """run_agent with one finish_reason=stop reply whose content is `content` (and a plain answer
    after it, in case the loop wrongly asked again); with tool_ran, a good multiply round first."""
    first = [fake_turn("call_1")] if tool_ran else []
    client = lesson.FakeClient(
        *first, fake_response("stop", content=content), fake_response("stop", content="3720")
    )
    messages: list = []
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        try:
            outcome = lesson.run_agent(client, "fake-model", question, messages)
        except AgentStop as stop:
            outcome = stop
    return Turn(outcome, len(client.requests), messages, printed.getvalue().splitlines())


def assert_written_call_stop(stop: object, content: str, step: int) -> None:
    assert isinstance(stop, AgentStop), f"printed as the answer: {content!r}"
    assert not isinstance(stop, RequestFailed)
    assert (stop.link, stop.exit_code, stop.step) == ("Provider", 1, step)
    assert stop.hint == lesson.HINT_WRITTEN_CALL, stop.reason  # not another Provider stop
    # what the model wrote is quoted (after the reasoning, which is never printed)
    assert lesson.clip(lesson.without_reasoning(content), 120) in stop.reason


def assert_refused(content: str, tool_ran: bool = False, **turn_args) -> None:
    result = turn(content, tool_ran=tool_ran, **turn_args)
    assert_written_call_stop(result.outcome, content, step=2 if tool_ran else 1)
    # nothing ran, nothing was asked again, the refused reply is not in the history
    if tool_ran:
        assert result.requests == 2 and result.messages == AFTER_A_TOOL
        assert result.lines[2:] == ["step 2: finish_reason=stop"]
    else:
        assert result.requests == 1 and result.messages == QUESTION
        assert result.lines == ["step 1: finish_reason=stop"]


def assert_prints(content: str, tool_ran: bool = False, **turn_args) -> None:
    result = turn(content, tool_ran=tool_ran, **turn_args)
    assert result.printed, f"refused: {content!r}: {getattr(result.outcome, 'reason', '')}"
    assert result.outcome == lesson.without_reasoning(content)
    assert result.messages[-1] == {"role": "assistant", "content": content}
    assert result.requests == 1 + tool_ran


# ---- the families -------------------------------------------------------------------------------
# The lesson's call in each syntax: one call, and two calls where the family has a parallel form.
# J/P: the JSON call with "arguments" or "parameters"; J2/P2: a second call; ARGS: the object.

J = '{"name": "multiply", "arguments": {"a": 248, "b": 15}}'
J2 = '{"name": "multiply", "arguments": {"a": 6, "b": 7}}'
P = '{"name": "multiply", "parameters": {"a": 248, "b": 15}}'
P2 = '{"name": "multiply", "parameters": {"a": 6, "b": 7}}'
ARGS = '{"a": 248, "b": 15}'
ARGS2 = '{"a": 6, "b": 7}'
QWEN3_CODER = (
    "<tool_call>\n<function=multiply>\n<parameter=a>\n248\n</parameter>\n"
    "<parameter=b>\n15\n</parameter>\n</function>\n</tool_call>"
)
GLM = (
    "<tool_call>multiply\n<arg_key>a</arg_key>\n<arg_value>248</arg_value>\n"
    "<arg_key>b</arg_key>\n<arg_value>15</arg_value>\n</tool_call>"
)
MINIMAX_M2 = (
    '<invoke name="multiply">\n<parameter name="a">248</parameter>\n'
    '<parameter name="b">15</parameter>\n</invoke>'
)
DSML = (
    '<｜DSML｜invoke name="multiply">\n<｜DSML｜parameter name="a" string="false">248'
    '</｜DSML｜parameter>\n<｜DSML｜parameter name="b" string="false">15</｜DSML｜parameter>\n'
    "</｜DSML｜invoke>"
)
STEP3 = (
    '<｜tool_call_begin｜><steptml:invoke name="multiply"><steptml:parameter name="a">248'
    '</steptml:parameter><steptml:parameter name="b">15</steptml:parameter></steptml:invoke>'
    "<｜tool_call_end｜>"
)
KIMI = (
    "<|tool_call_begin|>functions.multiply:{n}<|tool_call_argument_begin|>{args}<|tool_call_end|>"
)
DEEPSEEK_R1 = (
    "<｜tool▁call▁begin｜>function<｜tool▁sep｜>multiply\n```json\n{args}\n```<｜tool▁call▁end｜>"
)
DEEPSEEK_V31 = "<｜tool▁call▁begin｜>multiply<｜tool▁sep｜>{args}<｜tool▁call▁end｜>"
SEED = (
    "<seed:tool_call>\n<function=multiply>\n<parameter=a>248</parameter>\n"
    "<parameter=b>15</parameter>\n</function>\n</seed:tool_call>"
)
HARMONY = "<|channel|>commentary to=functions.multiply <|constrain|>json<|message|>{args}<|call|>"
GEMMA4 = "<|tool_call>call:multiply{{a:{a},b:{b}}}<tool_call|>"
FUNCTION_GEMMA = (
    "<start_function_call>call:multiply{{a:<escape>{a}<escape>,b:<escape>{b}<escape>}}"
    "<end_function_call>"
)
COHERE = '{{"tool_call_id": "{n}", "tool_name": "multiply", "parameters": {args}}}'


@dataclass(frozen=True)
class Family:
    name: str
    one: str
    two: str | None = None


FAMILIES = [
    # llama.cpp tests/test-chat.cpp (Hermes 2 Pro, Hermes 3, Qwen2.5, MiMo-VL);
    # vLLM tests/entrypoints/openai/tool_parsers/test_hermes_tool_parser.py;
    # SGLang test/srt/test_function_call_parser.py (Qwen25Detector)
    Family(
        "Hermes / Qwen2.5 <tool_call>",
        f"<tool_call>\n{J}\n</tool_call>",
        f"<tool_call>\n{J}\n</tool_call>\n<tool_call>\n{J2}\n</tool_call>",
    ),
    # vLLM tests/tool_parsers/test_ernie45_moe_tool_parser.py: Hermes tags after </think>
    Family(
        "ERNIE 4.5 <tool_call> after reasoning",
        f"要调用工具。\n</think>\n\n<tool_call>\n{J}\n</tool_call>\n",
        f"要调用工具。\n</think>\n\n<tool_call>\n{J}\n</tool_call>\n<tool_call>\n{J2}\n</tool_call>\n",
    ),
    # vLLM tests/tool_use/test_qwen3coder_tool_parser.py; llama.cpp tests/test-chat.cpp
    # (Qwen3-Coder, Qwen3.5, NVIDIA Nemotron-3 Nano, StepFun3.5-Flash)
    Family("Qwen3-Coder <function=><parameter=>", QWEN3_CODER, f"{QWEN3_CODER}\n{QWEN3_CODER}"),
    # vLLM tests/entrypoints/openai/tool_parsers/test_llama3_json_tool_parser.py
    Family("Llama 3.x JSON", P, f"{P}; {P2}"),
    Family(
        "Llama 3.x JSON inside prose",  # same file: "Here is the result: {...} Would you like..."
        f"Here is the result: {P} Would you like to know more?",
        f"Here are the results: {P}; {P2} Would you like to know more?",
    ),
    # SGLang test/srt/test_function_call_parser.py (TestLlama32Detector): JSON then a sentence
    Family("Llama 3.2 JSON then a sentence", f"{P} 这样就能算出 248 乘以 15。"),
    # SGLang test/srt/test_function_call_parser.py (TestLlama32Detector, python_tag and ';')
    Family("Llama 3.1 <|python_tag|>", f"<|python_tag|>{P}", f"<|python_tag|>{P};{P2}"),
    # vLLM tests/entrypoints/openai/tool_parsers/test_pythonic_tool_parser.py (Llama 3.2);
    # SGLang test/srt/test_function_call_parser.py (TestPythonicDetector)
    Family(
        "pythonic [multiply(a=248, b=15)]",
        "[multiply(a=248, b=15)]",
        "[multiply(a=248, b=15), multiply(a=6, b=7)]",
    ),
    # SGLang test/srt/test_function_call_parser.py (<|python_start|> ... <|python_end|>, Llama 4)
    Family(
        "Llama 4 <|python_start|>",
        "<|python_start|>[multiply(a=248, b=15)]<|python_end|>",
        "<|python_start|>[multiply(a=248, b=15), multiply(a=6, b=7)]<|python_end|>",
    ),
    # vLLM tests/tool_use/test_mistral_tool_parser.py; llama.cpp tests/test-chat.cpp (Nemo)
    Family("Mistral [TOOL_CALLS] list", f"[TOOL_CALLS][{J}]", f"[TOOL_CALLS][{J}, {J2}]"),
    Family(  # same vLLM file, "argument_before_name"
        "Mistral [TOOL_CALLS] arguments before name",
        '[TOOL_CALLS] [{"arguments": {"a": 248, "b": 15}, "name": "multiply"}]',
    ),
    Family(  # same vLLM file, v11 tokenizer
        "Mistral v11 [TOOL_CALLS]name{...}",
        f"[TOOL_CALLS]multiply{ARGS}",
        f"[TOOL_CALLS]multiply{ARGS}[TOOL_CALLS]multiply{ARGS2}",
    ),
    # llama.cpp tests/test-chat.cpp (Mistral Small 3.2, Devstral, Ministral 3)
    Family(
        "Mistral Small 3.2 [CALL_ID][ARGS]",
        f"[TOOL_CALLS]multiply[CALL_ID]123456789[ARGS]{ARGS}",
        f"[TOOL_CALLS]multiply[ARGS]{ARGS}[TOOL_CALLS]multiply[ARGS]{ARGS2}",
    ),
    # llama.cpp tests/test-chat.cpp (DeepSeek R1 templates);
    # vLLM tests/entrypoints/openai/tool_parsers/test_deepseekv3_tool_parser.py
    Family(
        "DeepSeek V3 / R1 <｜tool▁calls▁begin｜>",
        f"<｜tool▁calls▁begin｜>{DEEPSEEK_R1.format(args=ARGS)}<｜tool▁calls▁end｜>",
        f"<｜tool▁calls▁begin｜>{DEEPSEEK_R1.format(args=ARGS)}"
        f"{DEEPSEEK_R1.format(args=ARGS2)}<｜tool▁calls▁end｜>",
    ),
    # llama.cpp tests/test-chat.cpp (DeepSeek V3.1);
    # vLLM tests/tool_use/test_deepseekv31_tool_parser.py
    Family(
        "DeepSeek V3.1 <｜tool▁sep｜>{...}",
        f"<｜tool▁calls▁begin｜>{DEEPSEEK_V31.format(args=ARGS)}<｜tool▁calls▁end｜>",
        f"<｜tool▁calls▁begin｜>{DEEPSEEK_V31.format(args=ARGS)}"
        f"{DEEPSEEK_V31.format(args=ARGS2)}<｜tool▁calls▁end｜>",
    ),
    # vLLM tests/tool_use/test_deepseek_v32_tool_parser.py (DSML)
    Family(
        "DeepSeek V3.2 DSML",
        f"<｜DSML｜function_calls>\n{DSML}\n</｜DSML｜function_calls>",
        f"<｜DSML｜function_calls>\n{DSML}\n{DSML}\n</｜DSML｜function_calls>",
    ),
    # llama.cpp tests/test-chat.cpp (Kimi-K2, Kimi-K2-Instruct, Kimi-K2-Thinking);
    # SGLang test/srt/test_function_call_parser.py (TestKimiK2Detector)
    Family(
        "Kimi K2 <|tool_calls_section_begin|>",
        f"<|tool_calls_section_begin|>{KIMI.format(n=0, args=ARGS)}<|tool_calls_section_end|>",
        f"<|tool_calls_section_begin|>{KIMI.format(n=0, args=ARGS)}"
        f"{KIMI.format(n=1, args=ARGS2)}<|tool_calls_section_end|>",
    ),
    # llama.cpp tests/test-chat.cpp (GLM-4.6, GLM-4.7-Flash);
    # vLLM tests/tool_use/test_glm4_moe_tool_parser.py
    Family("GLM-4.5 <arg_key>/<arg_value>", GLM, GLM + GLM.replace("248", "6").replace("15", "7")),
    Family(
        "GLM-4.7 <arg_key> without newlines",
        GLM.replace("\n", ""),
        (GLM + GLM).replace("\n", ""),
    ),
    # vLLM tests/tool_use/test_minimax_tool_parser.py (MiniMax-M1: one JSON object a line)
    Family(
        "MiniMax-M1 <tool_calls> lines",
        f"<tool_calls>\n{J}\n</tool_calls>",
        f"<tool_calls>\n{J}\n{J2}\n</tool_calls>",
    ),
    # llama.cpp tests/test-chat.cpp (MiniMax-M2); vLLM tests/tool_use/test_minimax_m2_tool_parser.py
    Family(
        "MiniMax-M2 <minimax:tool_call><invoke>",
        f"<minimax:tool_call>\n{MINIMAX_M2}\n</minimax:tool_call>",
        f"<minimax:tool_call>\n{MINIMAX_M2}\n{MINIMAX_M2}\n</minimax:tool_call>",
    ),
    # vLLM tests/tool_use/test_jamba_tool_parser.py
    Family(
        "Jamba <tool_calls>[...]",
        f" <tool_calls>[\n    {J}\n]</tool_calls>",
        f" <tool_calls>[\n    {J},\n    {J2}\n]</tool_calls>",
    ),
    # vLLM tests/entrypoints/openai/tool_parsers/test_hunyuan_a13b_tool_parser.py
    Family(
        "Hunyuan A13B <tool_calls>[...]",
        f"<tool_calls>[{J}]</tool_calls>",
        f"<tool_calls>[{J}, {J2}]</tool_calls>",
    ),
    # llama.cpp tests/test-chat.cpp (Apriel 1.5; Apriel 1.6 after [BEGIN FINAL RESPONSE])
    Family("Apriel <tool_calls>", f"<tool_calls>[{J}]</tool_calls>"),
    Family(
        "Apriel 1.6 after [BEGIN FINAL RESPONSE]",
        f"要算乘法。\n[BEGIN FINAL RESPONSE]\n<tool_calls>[{J}]</tool_calls>",
    ),
    # vLLM tests/entrypoints/openai/tool_parsers/test_granite_tool_parser.py (3.0 token, 3.1 tag)
    Family(
        "Granite 3.0 <|tool_call|>", f"<|tool_call|> [{J}]", f"<|tool_call|> [\n  {J},\n  {J2}\n]"
    ),
    Family("Granite 3.1 <tool_call> [...]", f"<tool_call> [{J}]", f"<tool_call> [{J}, {J2}]"),
    # vLLM tests/entrypoints/openai/tool_parsers/test_granite_20b_fc_tool_parser.py
    Family(
        "Granite 20B FC <function_call>",
        f"<function_call> {J}",
        f"<function_call> {J}\n<function_call> {J2}",
    ),
    # vLLM tests/entrypoints/openai/tool_parsers/test_internlm2_tool_parser.py (no parallel form)
    Family("InternLM2 <|action_start|><|plugin|>", f"<|action_start|><|plugin|>{P}<|action_end|>"),
    # vLLM tests/entrypoints/openai/tool_parsers/test_phi4mini_tool_parser.py
    Family("Phi-4-mini functools[...]", f"functools[{J}]", f"functools[\n  {J},\n  {J2}\n]"),
    # llama.cpp tests/test-chat.cpp (FireFunction v2: a space, then functools)
    Family("FireFunction v2 functools[...]", f" functools[{J}]", f" functools[{J}, {J2}]"),
    # llama.cpp tests/test-chat.cpp (meetkai functionary-medium v3.1)
    Family(
        "Functionary v3.1 <function=multiply>",
        f"<function=multiply>{ARGS}</function>",
        f"<function=multiply>{ARGS}</function><function=multiply>{ARGS2}</function>",
    ),
    # llama.cpp tests/test-chat.cpp (meetkai functionary-medium v3.2: recipient lines)
    Family(
        "Functionary v3.2 >>>multiply",
        f">>>multiply\n{ARGS}",
        f">>>all\n我来算。\n>>>multiply\n{ARGS}\n>>>multiply\n{ARGS2}",
    ),
    # llama.cpp tests/test-chat.cpp (CohereForAI c4ai-command-r-plus tool_use: Action: + fence)
    Family(
        "Command R+ Action: ```json",
        'Action:\n```json\n[{"tool_name": "multiply", "parameters": {"a": 248, "b": 15}}]\n```',
        'Action:\n```json\n[{"tool_name": "multiply", "parameters": {"a": 248, "b": 15}}, '
        '{"tool_name": "multiply", "parameters": {"a": 6, "b": 7}}]\n```',
    ),
    # llama.cpp tests/test-chat.cpp (CohereForAI c4ai-command-r7b)
    Family(
        "Command R7B <|START_ACTION|>",
        f"<|START_ACTION|>[\n    {COHERE.format(n=0, args=ARGS)}\n]<|END_ACTION|>",
        f"<|START_ACTION|>[\n    {COHERE.format(n=0, args=ARGS)},\n"
        f"    {COHERE.format(n=1, args=ARGS2)}\n]<|END_ACTION|>",
    ),
    # Gemma 3 has no tool tokens; Google's function-calling guide
    # (https://ai.google.dev/gemma/docs/capabilities/function-calling) asks for a tool_code fence
    # or a pythonic list
    Family(
        "Gemma 3 ```tool_code print(...)",
        "```tool_code\nprint(multiply(a=248, b=15))\n```",
        "```tool_code\nprint(multiply(a=248, b=15))\nprint(multiply(a=6, b=7))\n```",
    ),
    # vLLM tests/tool_parsers/test_gemma4_tool_parser.py
    Family(
        "Gemma 4 <|tool_call>call:multiply{...}",
        GEMMA4.format(a=248, b=15),
        GEMMA4.format(a=248, b=15) + GEMMA4.format(a=6, b=7),
    ),
    # vLLM tests/entrypoints/openai/tool_parsers/test_xlam_tool_parser.py (or tests/tool_use/)
    Family("xLAM JSON list", f"[{J}]", f"[{J}, {J2}]"),
    Family(
        "xLAM ```json fence after prose",
        f"I'll help you with that.\n```json\n[{J}]\n```",
        f"I'll help you with that.\n```json\n[{J}, {J2}]\n```",
    ),
    Family("xLAM [TOOL_CALLS] after prose", f"I'll check that for you.[TOOL_CALLS][{J}]"),
    # llama.cpp tests/test-chat.cpp (NVIDIA-Nemotron-Nano-v2)
    Family(
        "Nemotron Nano v2 <TOOLCALL>",
        f"<TOOLCALL>[{J}]</TOOLCALL>",
        f"<TOOLCALL>[{J}, {J2}]</TOOLCALL>",
    ),
    # vLLM tests/entrypoints/openai/tool_parsers/test_olmo3_tool_parser.py
    Family(
        "Olmo 3 <function_calls>",
        "<function_calls>multiply(a=248, b=15)</function_calls>",
        "<function_calls>multiply(a=248, b=15)\nmultiply(a=6, b=7)</function_calls>",
    ),
    # llama.cpp tests/test-chat.cpp (openai-gpt-oss-120b);
    # vLLM tests/entrypoints/openai/tool_parsers/test_openai_tool_parser.py
    Family(
        "gpt-oss Harmony commentary to=functions.multiply",
        HARMONY.format(args=ARGS),
        f"{HARMONY.format(args=ARGS)}<|start|>assistant{HARMONY.format(args=ARGS2)}",
    ),
    Family(
        "gpt-oss Harmony recipient in the role header",
        f" to=functions.multiply<|channel|>analysis<|message|>{ARGS}",
    ),
    # llama.cpp tests/test-chat.cpp (ByteDance-Seed-OSS);
    # vLLM tests/tool_use/test_seed_oss_tool_parser.py
    Family("Seed-OSS <seed:tool_call>", SEED, f"{SEED}\n{SEED}"),
    # vLLM tests/entrypoints/openai/tool_parsers/test_step3_tool_parser.py
    Family(
        "Step-3 <steptml:invoke>",
        f"<｜tool_calls_begin｜>{STEP3}<｜tool_calls_end｜>",
        f"<｜tool_calls_begin｜>{STEP3}<｜tool_sep｜>{STEP3}<｜tool_calls_end｜>",
    ),
    # vLLM tests/entrypoints/openai/tool_parsers/test_longcat_tool_parser.py
    Family(
        "LongCat <longcat_tool_call>",
        f"<longcat_tool_call>{J}</longcat_tool_call>",
        f"<longcat_tool_call>{J}</longcat_tool_call>\n<longcat_tool_call>{J2}</longcat_tool_call>",
    ),
    # llama.cpp tests/test-chat.cpp (LFM2-8B-A1B)
    Family(
        "LFM2 <|tool_call_start|>[...]",
        "<|tool_call_start|>[multiply(a=248, b=15)]<|tool_call_end|>",
        "<|tool_call_start|>[multiply(a=248, b=15), multiply(a=6, b=7)]<|tool_call_end|>",
    ),
    # llama.cpp tests/test-chat.cpp (Apertus-8B-Instruct: the function name as the key)
    Family(
        "Apertus <|tools_prefix|>",
        f'<|tools_prefix|>[{{"multiply": {ARGS}}}]<|tools_suffix|>',
        f'<|tools_prefix|>[{{"multiply": {ARGS}}}, {{"multiply": {ARGS2}}}]<|tools_suffix|>',
    ),
    # llama.cpp tests/test-chat.cpp (GigaChat3, GigaChat3.1)
    Family(
        "GigaChat 3 function call<|role_sep|>", f"<|message_sep|>\n\nfunction call<|role_sep|>\n{J}"
    ),
    Family("GigaChat 3.1 <|function_call|>", f"<|function_call|>{J}"),
    # tests/recordings/01 (llama-server, Qwen2.5-Coder, no tool template): a fenced JSON call
    Family("Qwen2.5-Coder ```json fence", f"```json\n{J}\n```"),
]

PROSE = "好的，我来调用工具计算 248 乘以 15。\n"
CASES = [pytest.param(f.one, id=f"{f.name}: alone") for f in FAMILIES]
CASES += [pytest.param(PROSE + f.one, id=f"{f.name}: after prose") for f in FAMILIES]
CASES += [pytest.param(f.two, id=f"{f.name}: two calls") for f in FAMILIES if f.two]


@pytest.mark.parametrize("content", CASES)
def test_with_no_tool_run_yet_every_familys_call_written_as_text_is_refused(content):
    assert_refused(content)


# Issue 36: once a tool has run in this Turn, a reply that reports the result beside a written call
# is the answer (the note on stderr quotes the call; tests below). The sentence goes after the
# call: before it, the ERNIE family's </think> would make it reasoning.
REPORTED = "\n上面就是我用的调用，248 乘以 15 等于 3720。"


@pytest.mark.parametrize("content", [pytest.param(f.one + REPORTED, id=f.name) for f in FAMILIES])
def test_after_a_tool_ran_every_familys_call_beside_a_sentence_is_the_answer(content):
    assert_prints(content, tool_ran=True)


# FunctionGemma writes every value between <escape> markers (vLLM
# tests/tool_parsers/test_functiongemma_tool_parser.py): `a:<escape>248`. <escape> is no <|…|>
# token and no tag naming `a`, so only a value that may start with `<` makes it an order (it
# printed as the answer until the rule allowed that).
@pytest.mark.parametrize(
    "content",
    [
        FUNCTION_GEMMA.format(a=248, b=15),
        "Let me check that for you. " + FUNCTION_GEMMA.format(a=248, b=15),
        FUNCTION_GEMMA.format(a=248, b=15) + FUNCTION_GEMMA.format(a=6, b=7),
    ],
    ids=["alone", "after prose", "two calls"],
)
def test_a_functiongemma_call_written_as_text_is_refused(content):
    assert_refused(content)


# Kimi K2's markers are special tokens; a server that decodes with skip_special_tokens (vLLM's
# default when no tool parser runs) drops them and leaves the call id glued to the arguments
# (llama.cpp tests/test-chat.cpp for the syntax; "the native tokens were being stripped",
# jundot/omlx#984). Still the tool's name bound to `"a": 248`, with only `:0` between.
@pytest.mark.parametrize(
    "content",
    [
        'functions.multiply:0{"a": 248, "b": 15}',
        'functions.multiply:0{"a": 248, "b": 15}functions.multiply:1{"a": 6, "b": 7}',
    ],
    ids=["alone", "two calls"],
)
def test_a_kimi_call_whose_special_tokens_were_stripped_is_refused(content):
    assert_refused(content)


# ---- judgement calls (decided by the lead; REFERENCE says which way) ----------------------------
# With no tool run yet in this Turn, a reply that is both an answer and an order is refused: the
# answer cannot come from a tool, and printing an order is the danger. (After a tool ran, such
# replies are answers with a note: issue 36, below.)

JUDGEMENT_REFUSED = {
    # a call object that also carries a result the model made up: still a call
    "a call with a made-up result": (
        '{"name":"multiply","arguments":{"a":248,"b":15},"result":3720}'
    ),
    # asked for an example, the model wrote one in a fence: the fence holds an order
    "a call example in a fenced block": f"调用的格式是这样的：\n```json\n{J}\n```",
    "a keyword call example in a python fence": "```python\nresult = multiply(a=248, b=15)\n```",
    # a leaked template control token means the server did not apply its template
    "a trailing <|im_end|>": "248 乘以 15 等于 3720。<|im_end|>",
    "a trailing <|eot_id|>": "248 × 15 = 3720<|eot_id|>",
    "a trailing <｜end▁of▁sentence｜>": "248 × 15 = 3720<｜end▁of▁sentence｜>",
    # issue 29: a keyword call multiply(a=248, b=15) is an order anywhere, beside prose too
    "a keyword call beside prose": "调用 multiply(a=248, b=15) 得到 3720。",
    "a keyword call reported in the past tense": "I called multiply (a=248, b=15) and got 3720.",
    # decided here: the tool's name and `a = 248` with only punctuation and spaces between them
    # are a call (`multiply: a=248` is one template's syntax), even with the result after them;
    # a word, a number or the end of a sentence between them makes it prose (NEAR_MISSES)
    "the tool, a colon, then a = 248": "multiply: a = 248, b = 15 → 3720",
    "a list of the tool and its inputs": "- tool: multiply\n- a: 248\n- b: 15\n- result: 3720",
}


@pytest.mark.parametrize("content", JUDGEMENT_REFUSED.values(), ids=JUDGEMENT_REFUSED.keys())
def test_with_no_tool_run_yet_a_reply_that_is_both_an_answer_and_an_order_is_refused(content):
    assert_refused(content)


# ---- near misses: answers, and they print -------------------------------------------------------

TAG_EXPLAINED = (
    "Qwen 的模板把调用包在 `<tool_call>` 标签里，例如 "
    '`<tool_call>{"name": "multiply", "arguments": {"a": 248, "b": 15}}</tool_call>`；'
    "服务端没解析时它就会出现在 content 里。248 乘以 15 等于 3720。"
)
SCHEMA_QUOTED = json.dumps(lesson.TOOLS[0]["function"], ensure_ascii=False)

NEAR_MISSES = {
    "Chinese answer": "248 乘以 15 等于 3720。",
    "English answer": "248 multiplied by 15 is 3720.",
    "the recorded 1.5B answer": "3720 is the result of multiplying 248 by 15.",
    "the tool named in prose": "我用 multiply 算出 3720。",
    "the tool and its result": "multiply 返回了 3720，所以答案是 3720。",
    "the tool named in English": "I used the multiply tool; it returned 3720.",
    "the tool's parameters described": "multiply 工具需要两个参数：a（整数）和 b（整数）。",
    "the parameters typed, not bound": "multiply takes two parameters, a: int and b: int.",
    "a = 248, b = 15 without the tool": "a = 248, b = 15, 所以 3720",
    "a = 248 near the tool across words": "我用 multiply 算了 a=248、b=15，结果 3720。",
    "the tool, then a = 248 after Chinese words": "用 multiply 计算：a = 248, b = 15，积 3720。",
    "positional multiply(248, 15) in prose": "multiply(248, 15) = 3720",  # decided: no names
    "positional in a sentence": "Sure — multiply(248, 15) returns 3720.",
    "a markdown table": "| a | b | a × b |\n|---|---|---|\n| 248 | 15 | 3720 |",
    "a table naming the tool": (
        "| 工具 | a | b | 结果 |\n|---|---|---|---|\n| multiply | 248 | 15 | 3720 |"
    ),
    "a python block computing 248 * 15": "```python\nprint(248 * 15)  # 3720\n```",
    "a python block defining multiply": (
        "```python\ndef multiply(a, b):\n    return a * b\n\nprint(multiply(248, 15))\n```"
    ),
    "a tag explained with an inline example": TAG_EXPLAINED,  # decided: inline code is a quote
    "an inline keyword call": "在 Python 里写 `multiply(a=248, b=15)` 就得到 3720。",
    "tags named, no call": "Qwen 用 <tool_call> 标签，Mistral 用 [TOOL_CALLS]；248 × 15 = 3720。",
    "the tool's result quoted": '工具返回 {"status": "completed", "result": 3720}，即 3720。',
    "steps": "步骤：\n1. 248 × 10 = 2480\n2. 248 × 5 = 1240\n3. 2480 + 1240 = 3720",
    "a greeting": "你好！有什么我可以帮忙的吗？",
    "the schema the harness sent, quoted back": SCHEMA_QUOTED,
    "a call inside the reasoning only": (
        "<think>要不要写 multiply(a=248, b=15)？工具已经返回了。</think>\n248 乘以 15 等于 3720。"
    ),
    "JSON with the operands but no tool": '{"a": 248, "b": 15, "product": 3720}',
    "the tool and operands across 'with'": "Using multiply with a=248 and b=15 gives 3720.",
}


@pytest.mark.parametrize("tool_ran", [False, True], ids=["no tool ran", "a tool ran"])
@pytest.mark.parametrize("content", NEAR_MISSES.values(), ids=NEAR_MISSES.keys())
def test_a_near_miss_is_an_answer_and_prints(content, tool_ran):
    assert_prints(content, tool_ran=tool_ran)


@pytest.mark.parametrize(
    ("question", "content"),
    [
        ("用 JSON 回答：248 乘以 15 是多少？键名用 result。", '{"result": 3720}'),
        ("Answer in JSON: 248 times 15?", '{"question": "248 * 15", "answer": 3720}'),
        ("Reply with a JSON list of the two factors and the product.", "[248, 15, 3720]"),
    ],
)
def test_json_asked_for_in_the_question_prints(question, content):
    assert_prints(content, question=question)


# Answers that report the result next to the inputs. Digits and a full stop are not glue: the
# tool's name, then the result or the end of a sentence, then `a = 248` is prose (these were
# refused while digits and `.` counted as glue).
RESULT_BESIDE_INPUTS = {
    "the result between the tool and its inputs": "Result of multiply: 3720 (a = 248, b = 15).",
    "a full stop between the tool and its inputs": "I used multiply. a = 248, b = 15: 3720.",
    "a positional call, then the operands": "multiply(248, 15) = 3720\na = 248, b = 15",
}


@pytest.mark.parametrize("content", RESULT_BESIDE_INPUTS.values(), ids=RESULT_BESIDE_INPUTS.keys())
def test_an_answer_that_reports_the_result_next_to_its_inputs_prints(content):
    assert_prints(content)


# ---- the rule comes from TOOLS, not from a list of names ---------------------------------------


def test_the_order_is_read_from_the_offered_tools(monkeypatch):
    tool = json.loads(json.dumps(lesson.TOOLS[0]))
    tool["function"]["name"] = "times"
    tool["function"]["parameters"]["properties"] = {"x": {"type": "integer"}}
    monkeypatch.setattr(lesson, "TOOLS", [tool])
    assert_refused("[times(x=248)]")
    assert_refused("<tool_call>times\n<arg_key>x</arg_key>\n<arg_value>248</arg_value></tool_call>")
    # multiply is no longer offered: its keyword call is prose now, times(a=...) has no parameter a
    assert_prints("multiply(a=248, b=15) 是上一课的工具。")
    assert_prints("times(a=248) 不是它的参数。")


# ---- the two rules that need no tool's name ----------------------------------------------------
# A template's control token is never part of an answer, and a reply that starts with a JSON call
# ({"name": ..., "arguments": ...}, in a fence or a list too) is a call whatever tool it names
# (recordings 12 and 13 name `hello`, which was never offered).

CONTROL_TOKENS = {
    "ChatML <|im_end|> after the answer": "248 乘以 15 等于 3720。<|im_end|>",
    "ChatML <|im_start|> before the answer": "<|im_start|>assistant\n248 乘以 15 等于 3720。",
    "Llama 3 <|eot_id|>": "248 × 15 = 3720<|eot_id|>",
    "<|endoftext|> alone": "<|endoftext|>",
    "DeepSeek's full-width <｜end▁of▁sentence｜>": "248 × 15 = 3720<｜end▁of▁sentence｜>",
}


@pytest.mark.parametrize("content", CONTROL_TOKENS.values(), ids=CONTROL_TOKENS.keys())
def test_with_no_tool_run_yet_a_leaked_control_token_is_refused(content):
    assert_refused(content)


CALLS_OF_ANY_NAME = {
    "recording 13's greeting": '{"name": "hello", "arguments": {}}',
    "arguments null in a fence": '```json\n{"name": "hello", "arguments": null}\n```',
    "a tool never offered": '{"name": "get_weather", "arguments": {"city": "北京"}}',
    "parameters": '{"name": "search", "parameters": {"query": "248*15"}}',
    "a list of calls": '[{"name": "lookup", "arguments": {"id": 1}}]',
    "tool_name and args": '{"tool_name": "calculator", "args": "248*15"}',
    "function and arguments": '{"function": "calculator", "arguments": "248*15"}',
    "a call, then a sentence": '{"name": "hello", "arguments": {}} 你好！',
    "a call after the reasoning": '<think>用户在打招呼</think>\n{"name": "hello", "arguments": {}}',
}


@pytest.mark.parametrize("content", CALLS_OF_ANY_NAME.values(), ids=CALLS_OF_ANY_NAME.keys())
def test_with_no_tool_run_yet_a_reply_that_starts_with_a_call_of_any_name_is_refused(content):
    assert_refused(content)


@pytest.mark.parametrize(
    "content",
    ["<|endoftext|>", "\n<|im_end|>\n", CALLS_OF_ANY_NAME["recording 13's greeting"]],
    ids=["a control token", "a control token on its own line", "a call of any name"],
)
def test_after_a_tool_ran_a_name_free_order_alone_still_stops(content):
    assert_refused(content, tool_ran=True)


@pytest.mark.parametrize(
    "content",
    [
        '{"name": "add", "parameters": {"type": "object", "properties": {"x": {}}}}',
        '{"name": "add", "description": "Add two integers", "parameters": {}}',
    ],
    ids=["a tool's schema", "a tool's definition"],
)
def test_a_reply_that_starts_with_a_tools_definition_is_not_a_call(content):
    assert_prints(content)


# ---- the real recordings keep their classification ----------------------------------------------


def recorded_body(number: str) -> dict:
    (path,) = RECORDINGS.glob(f"{number}-*.json")
    return json.loads(path.read_text(encoding="utf-8"))["response"]["body"]


@pytest.mark.parametrize("number", ["01", "02", "12", "13"])
def test_a_recorded_call_written_as_text_is_refused(number):
    body = recorded_body(number)
    content = body["choices"][0]["message"]["content"]
    client = lesson.FakeClient(body, fake_response("stop", content="3720"))
    messages: list = []
    with contextlib.redirect_stdout(io.StringIO()), pytest.raises(AgentStop) as stopped:
        lesson.run_agent(client, "fake-model", lesson.DEFAULT_QUESTION, messages)
    assert_written_call_stop(stopped.value, content, step=1)
    assert messages == QUESTION and len(client.requests) == 1


@pytest.mark.parametrize(
    ("call", "answer"), [("03", "37 乘以 41 是 1517。"), ("10", "3720 is the result of")]
)
def test_a_recorded_native_call_and_its_final_answer_are_accepted(call, answer):
    final = f"{int(call) + 1:02d}"
    client = lesson.FakeClient(recorded_body(call), recorded_body(final))
    messages: list = []
    with contextlib.redirect_stdout(io.StringIO()):
        printed = lesson.run_agent(client, "fake-model", lesson.DEFAULT_QUESTION, messages)
    assert printed.startswith(answer)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert json.loads(messages[2]["content"])["status"] == "completed"


# ---- the command line: exit code, the Agent> line, the note on stderr ---------------------------


@dataclass
class Run:
    code: int
    out: str
    err: str
    merged: str  # stdout and stderr in the order they were written, as with 2>&1

    @property
    def err_lines(self) -> list:
        return self.err.splitlines()

    @property
    def call_lines(self) -> list:
        """The step lines of the calls that ran."""
        return [line for line in self.out.splitlines() if " call_id=" in line]


class Stream(io.StringIO):
    """One of the two streams; everything written also goes to `merged`."""

    def __init__(self, merged: io.StringIO):
        super().__init__()
        self.merged = merged

    def write(self, text: str) -> int:
        self.merged.write(text)
        return super().write(text)


@pytest.fixture
def run(provider):
    """main() with no arguments against the scripted provider, over real HTTP with the real SDK."""

    def runner(*replies) -> Run:
        provider.script(*replies)
        env = {"OPENAI_API_KEY": "sk-test-written-calls", "OPENAI_MODEL": "qwen2.5-coder-1.5b"}
        env.update(OPENAI_BASE_URL=provider.base_url, OPENAI_TIMEOUT="5")
        merged = io.StringIO()
        out, err = Stream(merged), Stream(merged)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = lesson.main([], env)
        return Run(code, out.getvalue(), err.getvalue(), merged.getvalue())

    return runner


ARTICLE_CALL_LINE = f"step 1: multiply call_id=call_1 result={RESULT_3720}"


def assert_stopped_on_the_command_line(result: Run, content: str, step: int) -> None:
    """Exit 1, the Provider link at this step quoting the reply, the hint for written calls; no
    answer printed and no note."""
    assert result.code == 1, result.merged
    first, second = result.err_lines
    assert first.startswith(f"[Provider] step {step}: ") and lesson.clip(content, 120) in first
    assert second.endswith(lesson.HINT_WRITTEN_CALL)
    assert "Agent>" not in result.out and NOTE not in result.err
    assert "Traceback" not in result.merged


@pytest.mark.parametrize(
    "content",
    [
        FAMILIES[0].one,
        "[multiply(a=248, b=15)]",
        recorded_body("13")["choices"][0]["message"]["content"],
    ],
    ids=["Hermes", "pythonic", "recording 13"],
)
def test_on_the_command_line_a_written_call_exits_1_and_prints_no_answer(run, provider, content):
    result = run(completion(content=content), completion(content="3720"))
    assert_stopped_on_the_command_line(result, content, step=1)
    assert len(provider.requests) == 1 and result.call_lines == []


@pytest.mark.parametrize("tool_ran", [False, True], ids=["no tool ran", "a tool ran"])
def test_on_the_command_line_a_near_miss_exits_0_and_prints_the_answer_without_a_note(
    run, tool_ran
):
    replies = [ARTICLE_TOOL_TURN] if tool_ran else []
    result = run(*replies, completion(content=TAG_EXPLAINED))
    assert (result.code, result.err) == (0, ""), result.merged
    assert result.out.splitlines()[-1] == f"Agent> {TAG_EXPLAINED}"


def test_on_the_command_line_the_recorded_turn_prints_its_answer(run):
    result = run(
        recording("10-repo-template-native-call-step1")[1],
        recording("11-repo-template-final-answer-step2")[1],
    )
    assert (result.code, result.err) == (0, ""), result.merged
    assert result.out.splitlines()[-1] == "Agent> 3720 is the result of multiplying 248 by 15."


# ---- issue 36: after a tool ran, a reply that reports the call is the answer --------------------
# Each reply and (hand-written) the part of it the note must quote. The note is one line: the
# reply's line breaks become spaces there.

REPORTS = {
    "a keyword call, then the result": (
        "multiply(a=248, b=15) 的结果是 3720。",
        "multiply(a=248, b=15)",
    ),
    "the call in brackets after the result": (
        "结果是 3720（multiply: a=248, b=15）",
        "multiply: a=248, b=15",
    ),
    "a list of the tool and its inputs": (
        "- 工具：multiply\n- a: 248\n- b: 15\n- 结果：3720",
        "multiply - a: 248 - b: 15",
    ),
    "a table row": ("| multiply | a=248, b=15 | 3720 |", "| multiply | a=248, b=15 |"),
    "a JSON summary": (
        '{"tool": "multiply", "a": 248, "b": 15, "result": 3720}',
        '"tool": "multiply", "a": 248, "b": 15',
    ),
    "an arrow chain": ("a=248, b=15 -> multiply -> 3720", "a=248, b=15 -> multiply"),
    "a trailing control token": ("248 乘以 15 等于 3720。<|im_end|>", "<|im_end|>"),
    "a request example in a fence": (
        f"结果是 3720。\n如果你想自己调用工具，请求大概是这样：\n```json\n{J}\n```",
        J,
    ),
}


@pytest.mark.parametrize(("content", "quoted"), REPORTS.values(), ids=REPORTS.keys())
def test_after_a_tool_ran_a_reply_reporting_the_call_is_printed_with_one_note(
    run, provider, content, quoted
):
    result = run(ARTICLE_TOOL_TURN, completion(content=content))
    assert result.code == 0, result.merged
    assert result.out.endswith(f"Agent> {content}\n")
    (note,) = result.err_lines  # one line, whatever the reply's line breaks
    assert note.startswith(NOTE) and quoted in note, note
    assert result.merged.endswith(f"Agent> {content}\n{note}\n")  # after the Agent> line
    assert result.call_lines == [ARTICLE_CALL_LINE] and len(provider.requests) == 2


@pytest.mark.parametrize(("content", "quoted"), REPORTS.values(), ids=REPORTS.keys())
def test_with_no_tool_run_yet_the_same_replies_stop(run, provider, content, quoted):
    result = run(completion(content=content), completion(content="3720"))
    assert_stopped_on_the_command_line(result, content, step=1)
    assert result.call_lines == [] and len(provider.requests) == 1


# Half an answer: the tool ran for 12 × 13, the reply gives that result and writes the next call
# (14 × 15) as text. The first half is printed; the note says the second was not executed.
J14 = '{"name": "multiply", "arguments": {"a": 14, "b": 15}}'
HALF_ANSWERS = {
    "bare JSON": (f"12 乘 13 等于 156。{J14}", '"a": 14, "b": 15'),
    "bare JSON on its own line": (f"12 乘 13 等于 156。\n{J14}", '"a": 14, "b": 15'),
    "<tool_call>": (f"12 乘 13 等于 156。\n<tool_call>\n{J14}\n</tool_call>", '"a": 14, "b": 15'),
    "pythonic": ("12 乘 13 等于 156。\n[multiply(a=14, b=15)]", "multiply(a=14, b=15)"),
}
CALL_12_13 = completion(
    tool_calls=[tool_call("call_1", "multiply", '{"a":12,"b":13}')], finish_reason="tool_calls"
)


@pytest.mark.parametrize(("content", "quoted"), HALF_ANSWERS.values(), ids=HALF_ANSWERS.keys())
def test_half_an_answer_prints_its_first_half_and_the_note_quotes_the_unrun_call(
    run, provider, content, quoted
):
    result = run(CALL_12_13, completion(content=content))
    assert result.code == 0, result.merged
    assert result.call_lines == [
        'step 1: multiply call_id=call_1 result={"status":"completed","result":156}'
    ]
    assert result.out.split("Agent> ", 1)[1].startswith("12 乘 13 等于 156。")
    (note,) = result.err_lines
    assert note.startswith(NOTE) and quoted in note, note
    assert "210" not in result.merged and len(provider.requests) == 2  # 14 × 15 never ran


# A reply that is only an order stops at any step: nothing but the order is left once it is taken
# out, so it reports nothing, whether or not a tool ran before it.
ONLY_AN_ORDER = {
    "bare JSON": J14,
    "```json fence": f"```json\n{J14}\n```",
    "<tool_call>": f"<tool_call>\n{J14}\n</tool_call>",
    "pythonic": "[multiply(a=14, b=15)]",
}


@pytest.mark.parametrize("step", [1, 2])
@pytest.mark.parametrize("content", ONLY_AN_ORDER.values(), ids=ONLY_AN_ORDER.keys())
def test_a_reply_that_is_only_an_order_stops_at_any_step(run, provider, content, step):
    before = [ARTICLE_TOOL_TURN] if step == 2 else []
    result = run(*before, completion(content=content), completion(content="210"))
    assert_stopped_on_the_command_line(result, content, step=step)
    assert result.call_lines == [ARTICLE_CALL_LINE] * (step - 1)
    assert len(provider.requests) == step


# ---- properties ---------------------------------------------------------------------------------
# Replies drawn from the family syntaxes, with other argument values, other whitespace and prose
# around them, are always refused while no tool has run, and are the answer (with a note) once one
# has, as long as a sentence is left beside them; an order alone is refused either way. Replies
# drawn from plausible answers always print, with no note.

SENTENCES = [
    "好的，我来帮你算。",
    "这需要调用工具。",
    "Let me work that out.",
    "Sure!",
    "I'll compute 248 times 15.",
    "结果马上就好：",
    "Here you go:",
    "稍等。",
    "Would you like to know more?",
    "算完了告诉你。",
]
GAPS = ["", " ", "\n", "\n\n", "  \n"]
SPACES = ["", " ", "  ", "\n", "\n    ", "\t"]


def rewritten(call: str, a: str, b: str, after_comma: str, after_colon: str) -> str:
    """A family's call with other values and other whitespace after its commas and colons."""
    text = re.sub(r"(?<![\w.])248(?![\w.])", "\0A", call)
    text = re.sub(r"(?<![\w.])15(?![\w.])", "\0B", text)
    text = text.replace(", ", "," + after_comma).replace(": ", ":" + after_colon)
    return text.replace("\0A", a).replace("\0B", b)


def reply(content: str) -> SimpleNamespace:
    """The message final_answer reads (as read_reply shapes it: content and refusal)."""
    return SimpleNamespace(content=content, refusal=None)


NUMBERS = st.one_of(
    st.integers(-(10**9), 10**9).map(str),
    st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False).map(lambda x: repr(round(x, 3))),
)


@settings(max_examples=300, deadline=None)
@given(
    call=st.sampled_from([f.one for f in FAMILIES] + [f.two for f in FAMILIES if f.two]),
    a=NUMBERS,
    b=NUMBERS,
    after_comma=st.sampled_from(SPACES),
    after_colon=st.sampled_from(SPACES),
    before=st.lists(st.sampled_from(SENTENCES), max_size=3).map("".join),
    after=st.lists(st.sampled_from(SENTENCES), max_size=3).map("".join),
    gaps=st.tuples(st.sampled_from(GAPS), st.sampled_from(GAPS)),
)
@example(
    call="[multiply(a=248, b=15)]",
    a="0",
    b="-1",
    after_comma="\n",
    after_colon="",
    before="",
    after="",
    gaps=("", ""),
)
def test_property_a_familys_call_among_prose_is_always_refused(
    call, a, b, after_comma, after_colon, before, after, gaps
):
    written = rewritten(call, a, b, after_comma, after_colon)
    content = f"{before}{gaps[0]}{written}{gaps[1]}{after}"
    with pytest.raises(AgentStop) as stopped:
        lesson.final_answer(reply(content), tool_ran=False)
    assert (stopped.value.link, stopped.value.exit_code) == ("Provider", 1)
    assert stopped.value.hint == lesson.HINT_WRITTEN_CALL


FAMILY_CALLS = [f.one for f in FAMILIES] + [f.two for f in FAMILIES if f.two]


@settings(max_examples=200, deadline=None)
@given(
    call=st.sampled_from(FAMILY_CALLS),
    a=NUMBERS,
    b=NUMBERS,
    after_comma=st.sampled_from(SPACES),
    after_colon=st.sampled_from(SPACES),
    gap=st.sampled_from([*GAPS[1:], "。"]),
    after=st.lists(st.sampled_from(SENTENCES), min_size=1, max_size=3).map("".join),
)
def test_property_after_a_tool_ran_a_familys_call_beside_a_sentence_is_the_answer_with_a_note(
    call, a, b, after_comma, after_colon, gap, after
):
    written = rewritten(call, a, b, after_comma, after_colon)
    content = f"{written}{gap}{after}"
    assert lesson.final_answer(reply(content), tool_ran=True) == lesson.without_reasoning(content)
    assert lesson.written_orders(lesson.without_reasoning(content))  # the note has what to quote


# ONLY_AN_ORDER's forms with the lesson's call, for rewritten() to vary
ORDER_FORMS = [
    J,
    f"```json\n{J}\n```",
    f"<tool_call>\n{J}\n</tool_call>",
    "[multiply(a=248, b=15)]",
]


@settings(max_examples=200, deadline=None)
@given(
    call=st.sampled_from(ORDER_FORMS),
    a=NUMBERS,
    b=NUMBERS,
    after_comma=st.sampled_from(SPACES),
    after_colon=st.sampled_from(SPACES),
    gaps=st.tuples(st.sampled_from(GAPS), st.sampled_from(GAPS)),
    tool_ran=st.booleans(),
)
def test_property_an_order_alone_is_refused_whether_or_not_a_tool_ran(
    call, a, b, after_comma, after_colon, gaps, tool_ran
):
    content = f"{gaps[0]}{rewritten(call, a, b, after_comma, after_colon)}{gaps[1]}"
    with pytest.raises(AgentStop) as stopped:
        lesson.final_answer(reply(content), tool_ran=tool_ran)
    assert stopped.value.hint == lesson.HINT_WRITTEN_CALL


# Fragments an answer is made of, drawn in any order: sentences with numbers, the tool named in
# prose or with positional arguments, the operands named a and b, tags and calls in inline code.
ANSWER_FRAGMENTS = [
    "{x} 乘以 {y} 等于 {p}。",
    "The product of {x} and {y} is {p}.",
    "{x} × {y} = {p}",
    "答案：{p}",
    "Sure! {x} times {y} equals {p}.",
    "| a | b | 积 |\n|---|---|---|\n| {x} | {y} | {p} |",
    "\n```python\nprint({x} * {y})\n```\n",  # a fence opens and closes on its own line
    "`<tool_call>` 是 Qwen 模板的标签，`[TOOL_CALLS]` 是 Mistral 的。",
    "调用的写法是 `multiply(a={x}, b={y})`。",
    '`{{"name": "multiply", "arguments": {{"a": {x}, "b": {y}}}}}` 是调用的样子。',
    "你好！",
    "我用 multiply 工具算出结果：{p}。",
    "multiply 返回了 {p}，所以答案是 {p}。",
    "I used the multiply tool and it returned {p}.",
    "multiply({x}, {y}) = {p}",
    "工具 multiply 已经给出结果。",
    "a = {x}, b = {y}, 所以 {p}",
    "a 是 {x}，b 是 {y}，积为 {p}。",
    '{{"a": {x}, "b": {y}, "product": {p}}}',
]


@settings(max_examples=300, deadline=None)
@given(
    fragments=st.lists(st.sampled_from(ANSWER_FRAGMENTS), min_size=1, max_size=4),
    x=st.integers(-(10**6), 10**6),
    y=st.integers(-(10**6), 10**6),
    joiner=st.sampled_from([" ", "\n", "\n\n", ""]),
)
def test_property_a_plausible_answer_always_prints_with_no_note(fragments, x, y, joiner):
    content = joiner.join(fragments).format(x=x, y=y, p=x * y)
    for tool_ran in (False, True):
        answer = lesson.final_answer(reply(content), tool_ran=tool_ran)
        assert answer == lesson.without_reasoning(content)
    assert lesson.written_orders(answer) == []  # nothing for run_online's note
