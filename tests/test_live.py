"""The command line against a real endpoint: what must hold for any provider and any model.

Opt-in, so the normal test run and CI never depend on a live server:

    LIVE_OPENAI_BASE_URL=http://127.0.0.1:8080/v1 LIVE_OPENAI_MODEL=qwen2.5-coder-1.5b \\
        python -m pytest tests/test_live.py -v -n 0

LIVE_OPENAI_API_KEY is optional: without it a made-up key is sent (local servers take any), so
that "the key is never printed" is checked too. A model may answer, stop the loop or fail; each
is allowed, but only in the documented forms checked below.
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
KEY = os.environ.get("LIVE_OPENAI_API_KEY", "sk-live-made-up-0123456789abcdef")

pytestmark = pytest.mark.skipif(
    not (BASE_URL and MODEL), reason="set LIVE_OPENAI_BASE_URL and LIVE_OPENAI_MODEL to run"
)

# README's exit codes for a run whose configuration is right: an answer, a stopped loop (or a
# bug, shown with its traceback), a failed request
EXIT_CODES = {0, 1, 3}
STEP_LINE = re.compile(r"step (\d+): finish_reason=(.+)")
TOOL_LINE = re.compile(r"step (\d+): (.+) call_id=(.+) result=(\{.*\})")
LINKS = re.compile(r"\[(Harness|SDK/网络|Provider|Model)\] ")


def run_cli(*args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    env = {k: v for k, v in env.items() if k not in TRUST_VARIABLES}
    env.update(MACHINE_TRUST)  # the suite's one-certificate trust store would refuse real TLS
    env.update(OPENAI_BASE_URL=BASE_URL, OPENAI_MODEL=MODEL, OPENAI_API_KEY=KEY)
    env["OPENAI_TIMEOUT"] = os.environ.get("LIVE_OPENAI_TIMEOUT", "300")  # CPU-only models
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=3000
    )
    return done.returncode, done.stdout, done.stderr


def step_numbers(lines):
    """Every line is one of the article's two step-line forms; their step numbers."""
    steps = []
    for line in lines:
        step = TOOL_LINE.fullmatch(line) or STEP_LINE.fullmatch(line)
        assert step, f"not an article step line: {line!r}"
        steps.append(int(step.group(1)))
        if step.re is TOOL_LINE:
            assert json.loads(step.group(4))["status"] in ("completed", "error"), line
    return steps


QUESTIONS = [lesson.DEFAULT_QUESTION, "37 乘以 41 是多少？", "-7 乘以 6 等于几", "你好"]


@pytest.mark.parametrize("question", QUESTIONS)
def test_any_endpoint_ends_in_a_documented_outcome(question):
    code, out, err = run_cli("--show-messages", question)
    assert code in EXIT_CODES, (code, out, err)
    assert "Traceback" not in out + err and "Exception ignored" not in out + err, err
    assert KEY not in out + err
    lines = out.splitlines()
    answer_at = next((i for i, line in enumerate(lines) if line.startswith("Agent> ")), None)
    history_at = lines.index("[", answer_at or 0)  # --show-messages prints it however it ends
    steps = step_numbers(lines[: history_at if answer_at is None else answer_at])
    assert steps == sorted(steps) and set(steps) <= set(range(1, lesson.MAX_STEPS + 1)), steps
    history = json.loads("\n".join(lines[history_at:]))
    assert history[0] == {"role": "user", "content": question}
    assert pairing_problems(history) == []  # every call answered once, whatever the ending
    if code == 0:
        assert answer_at is not None and lines[answer_at][len("Agent> ") :].strip(), out
        assert STEP_LINE.fullmatch(lines[answer_at - 1]).group(2) == "stop", out
        assert history[-1]["role"] == "assistant" and "tool_calls" not in history[-1]
        # at most a note about calls written as text, which were not executed; never a report
        assert len(err.splitlines()) <= 1 and not LINKS.match(err), err
    else:  # the two-line report: which link, at which step, why; the last success and advice
        assert answer_at is None, out
        first, second = err.splitlines()
        assert LINKS.match(first) and "建议：" in second, err
        stopped_at = re.match(r"\[[^\]]+\] (?:step (\d+): )?", first)[1]  # none past MAX_STEPS
        if stopped_at:  # a reply that was refused, or the request after the last step line
            assert int(stopped_at) - max(steps, default=0) in (0, 1), (first, steps)
