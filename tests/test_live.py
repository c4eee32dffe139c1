"""The command line against a real endpoint: what must hold for any provider and any model.

Opt-in, so the normal test run and CI never depend on a live server:

    LIVE_OPENAI_BASE_URL=http://127.0.0.1:8080/v1 LIVE_OPENAI_MODEL=qwen2.5-coder-0.5b \\
        python -m pytest tests/test_live.py -v

LIVE_OPENAI_API_KEY is optional (default "local"). A model may answer, refuse, or write its
call as text; each is allowed, but only in the documented forms checked below.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import lesson_03_tool_calling_loop as lesson
from tests.conftest import MACHINE_TRUST, TRUST_VARIABLES
from tests.runs import pairing_problems

SCRIPT = Path(lesson.__file__).resolve()
BASE_URL = os.environ.get("LIVE_OPENAI_BASE_URL", "")
MODEL = os.environ.get("LIVE_OPENAI_MODEL", "")
KEY = os.environ.get("LIVE_OPENAI_API_KEY", "local")

pytestmark = pytest.mark.skipif(
    not (BASE_URL and MODEL), reason="set LIVE_OPENAI_BASE_URL and LIVE_OPENAI_MODEL to run"
)

DOCUMENTED_EXIT_CODES = {0, 1, 2, 3, 4}
STEP_LINE = re.compile(r"step (\d+): finish_reason=(\S+)")
TOOL_LINE = re.compile(r"step (\d+): (\S+) call_id=(\S+) result=(\{.*\})")
FIRST_FAILURE_LINE = re.compile(r"\[(Harness|SDK/网络|Provider|Model)\] ")


def run_cli(*args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    env = {k: v for k, v in env.items() if k not in TRUST_VARIABLES}
    env.update(MACHINE_TRUST)  # the suite's one-certificate trust store would refuse real TLS
    env.update(OPENAI_BASE_URL=BASE_URL, OPENAI_MODEL=MODEL, OPENAI_API_KEY=KEY)
    env.setdefault("OPENAI_TIMEOUT", "120")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=600
    )
    return done.returncode, done.stdout, done.stderr


def check_step_lines(lines):
    """Every line before the answer is one of the article's two step-line forms, in order."""
    steps = []
    for line in lines:
        step = STEP_LINE.fullmatch(line) or TOOL_LINE.fullmatch(line)
        assert step, f"not an article step line: {line!r}"
        steps.append(int(step.group(1)))
        if TOOL_LINE.fullmatch(line):
            result = json.loads(step.group(4))
            assert result["status"] in ("completed", "error")
    assert steps == sorted(steps) and 1 <= steps[-1] <= lesson.MAX_STEPS
    return steps


QUESTIONS = [lesson.DEFAULT_QUESTION, "37 乘以 41 是多少？", "-7 乘以 6 等于几", "你好"]


@pytest.mark.parametrize("question", QUESTIONS)
def test_any_endpoint_ends_in_a_documented_outcome(question):
    code, out, err = run_cli("--show-messages", question)
    assert code in DOCUMENTED_EXIT_CODES, (code, out, err)
    assert "Traceback" not in out + err and "Exception ignored" not in out + err
    if len(KEY) >= 8:
        assert KEY not in out + err
    lines = out.splitlines()
    answer_at = next((i for i, line in enumerate(lines) if line.startswith("Agent> ")), None)
    history_at = next((i for i, line in enumerate(lines) if line == "["), len(lines))
    if code == 0:
        assert err == "" and answer_at is not None
        check_step_lines(lines[:answer_at])
        assert STEP_LINE.fullmatch(lines[answer_at - 1]).group(2) == "stop"
        answer = lines[answer_at][len("Agent> ") :]
        assert answer.strip() and not lesson.looks_like_tool_call_text(answer)
    else:
        assert answer_at is None
        first, second = err.splitlines()[:2]
        assert FIRST_FAILURE_LINE.match(first) and "建议：" in second
        # A configuration error or no HTTP answer at all: the endpoint was never tested
        assert code != 2 and not first.startswith("[SDK/网络]"), f"not reached: {first}"
        if history_at:
            check_step_lines(lines[:history_at])
    if history_at < len(lines):
        history = json.loads("\n".join(lines[history_at:]))
        assert history[0] == {"role": "user", "content": question}
        if code == 0:
            assert pairing_problems(history) == []
            assert history[-1]["role"] == "assistant" and "tool_calls" not in history[-1]
