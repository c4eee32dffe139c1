"""The offline self-check: runs under -O, imports no openai, catches planted bugs."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

import lesson_03_tool_calling_loop as lesson

SCRIPT = Path(lesson.__file__).resolve()


def self_check(script=SCRIPT, *flags):
    return subprocess.run(
        [sys.executable, *flags, str(script), "--self-check"],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("flags", [(), ("-O",), ("-OO",)], ids=["plain", "-O", "-OO"])
def test_self_check_passes_with_one_ok_line_per_check(flags):
    done = self_check(SCRIPT, *flags)
    total = len(lesson.SELF_CHECKS)
    ok_lines = [f"[{n}/{total}] ok  {name}" for n, (name, _) in enumerate(lesson.SELF_CHECKS, 1)]
    assert (done.returncode, done.stdout.splitlines(), done.stderr) == (
        0,
        [*ok_lines, "self-check passed"],
        "",
    )


@pytest.fixture
def poisoned_openai(tmp_path):
    """A folder whose openai package ends the interpreter the moment it is imported."""
    package = tmp_path / "poisoned" / "openai"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise SystemExit('imported openai')\n")
    return package.parent


def test_the_poisoned_openai_package_stops_an_import(poisoned_openai):
    # Guards the next test against passing vacuously: the poison must really bite.
    probe = f"import sys; sys.path.insert(0, {str(poisoned_openai)!r}); import openai"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr.strip()) == (1, "imported openai")


def test_self_check_never_imports_openai(poisoned_openai):
    probe = (
        "import runpy, sys\n"
        f"sys.path.insert(0, {str(poisoned_openai)!r})\n"
        f"sys.argv = [{str(SCRIPT)!r}, '--self-check']\n"
        "try:\n"
        f"    runpy.run_path({str(SCRIPT)!r}, run_name='__main__')\n"
        "except SystemExit as done:\n"
        "    code = done.code\n"
        "print('openai' in sys.modules, code)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.stdout.splitlines()[-1:] == ["False 0"], done.stdout + done.stderr


# Each entry replaces one exact piece of the script (found exactly once) with a bug.
PLANTED_BUGS = {
    "bool accepted": (
        "isinstance(value, bool) or not isinstance(value, int)",
        "not isinstance(value, int)",
    ),
    "range unchecked": ("abs(value) > MAX_ABS_VALUE", "False"),
    "duplicate keys take the last": ("if len(set(keys)) < len(keys):", "if False:"),
    "extra keys allowed": (
        'if set(arguments) != {"a", "b"}:',
        'if not {"a", "b"} <= set(arguments):',
    ),
    "length passed off as final": (
        'if choice.finish_reason == "stop":',
        'if choice.finish_reason in ("stop", "length"):',
    ),
    "tool calls run whatever the finish_reason": (
        'if choice.finish_reason not in ("tool_calls", "stop"):',
        "if False:",
    ),
    "the assistant message stored after its results": (
        "messages.append(reply)  # 先存 assistant",
        "pass  # 先存 assistant",
    ),
    "strings turned into integers": (
        'multiply(arguments["a"], arguments["b"])',
        'multiply(int(arguments["a"]), int(arguments["b"]))',
    ),
    "tool calls with stop refused": ('not in ("tool_calls", "stop"):', 'not in ("tool_calls",):'),
    "Gemini's extra_content dropped": (
        'ECHOED_CALL_FIELDS = ("extra_content",)',
        "ECHOED_CALL_FIELDS = ()",
    ),
    "OpenRouter's reasoning_details dropped": (
        'ECHOED_MESSAGE_FIELDS = ("reasoning_content", "reasoning_details")',
        'ECHOED_MESSAGE_FIELDS = ("reasoning_content",)',
    ),
    "every private field echoed": (
        'ECHOED_MESSAGE_FIELDS = ("reasoning_content", "reasoning_details")',
        'ECHOED_MESSAGE_FIELDS = ("reasoning_content", "reasoning_details", "reasoning")',
    ),
    "think block printed as the answer": (
        'text = without_reasoning(message.content or "")',
        'text = message.content or ""',
    ),
    "missing ids accepted": ("not all(ids) or ", ""),
    "duplicate ids accepted": (" or len(set(ids)) < len(ids)", ""),
    "tool_call_id dropped": ('"tool_call_id": call.id', '"tool_call_id": ""'),
    "one request too many": ("range(1, MAX_STEPS + 1)", "range(1, MAX_STEPS + 2)"),
    "loose JSON": (
        'json.dumps(payload, ensure_ascii=False, separators=(",", ":"))',
        'json.dumps(payload, ensure_ascii=False, separators=(", ", ": "))',
    ),
    "Schema loses additionalProperties False": ('"additionalProperties": False,', ""),
    'Schema\'s a becomes "number"': ('"a": {"type": "integer"},', '"a": {"type": "number"},'),
    "Schema requires only a": ('"required": ["a", "b"],', '"required": ["a"],'),
    "empty answer accepted": (
        "if not any(char.isprintable() and not char.isspace()",
        "if not any(False",
    ),
    "call written as text accepted": (
        'if orders and (not tool_ran or not re.search(r"[^\\W_]", left)):',
        "if False:",
    ),
    # issue 36: after a tool ran, a reply that reports the call (a table) is the answer
    "a report of the call refused after a tool ran": (
        'if orders and (not tool_ran or not re.search(r"[^\\W_]", left)):',
        "if orders:",
    ),
    "the loop never says a tool ran": (
        'tool_ran=messages[-1]["role"] == "tool"',
        "tool_ran=False",
    ),
    "a refused final answer written to the history": (
        'answer = final_answer(message, tool_ran=messages[-1]["role"] == "tool")\n'
        "                messages.append(reply)",
        "messages.append(reply)\n"
        '                answer = final_answer(message, tool_ran=messages[-2]["role"] == "tool")',
    ),
    "any finish_reason taken as a final answer": (
        "                return answer\n            raise unfinished(choice)",
        "                return answer\n            return final_answer(message, tool_ran=False)",
    ),
    # issue 24: Ollama, old LM Studio and llama-cpp-python refuse content: null beside calls
    "content null kept beside tool calls": (
        '"content": message.content or ""',
        '"content": message.content',
    ),
}


@pytest.mark.parametrize(("original", "planted"), PLANTED_BUGS.values(), ids=PLANTED_BUGS.keys())
def test_every_planted_bug_has_an_anchor_found_exactly_once(original, planted):
    source = SCRIPT.read_text(encoding="utf-8")
    assert source.count(original) == 1, f"mutation anchor not found once: {original}"
    assert planted != original


@pytest.mark.parametrize(("original", "planted"), PLANTED_BUGS.values(), ids=PLANTED_BUGS.keys())
def test_self_check_under_python_O_catches_a_planted_bug(tmp_path, original, planted):
    source = SCRIPT.read_text(encoding="utf-8")
    mutant_source = source.replace(original, planted, 1)
    assert mutant_source != source, f"mutation anchor not found: {original}"
    mutant = tmp_path / SCRIPT.name
    mutant.write_text(mutant_source, encoding="utf-8")
    done = self_check(mutant, "-O")
    assert (done.returncode, "Traceback" in done.stderr) == (1, False), done.stdout + done.stderr
    failed, last = done.stderr.splitlines()
    number = int(re.match(r"\[(\d+)/", failed)[1])
    name = lesson.SELF_CHECKS[number - 1][0]  # the line names the check that caught the bug
    assert failed.startswith(f"[{number}/{len(lesson.SELF_CHECKS)}] 失败：{name}："), failed
    assert last == "self-check failed"
    # the checks before it still pass and say so
    assert done.stdout.splitlines() == [
        f"[{n}/{len(lesson.SELF_CHECKS)}] ok  {lesson.SELF_CHECKS[n - 1][0]}"
        for n in range(1, number)
    ]


def test_output_streams_without_reconfigure_are_fine():
    # IDLE's and Jupyter's stdout have no reconfigure(); runpy stands in for them here.
    probe = (
        "import io, runpy, sys\n"
        "sys.stdout = io.StringIO()\n"
        f"sys.argv = [{str(SCRIPT)!r}, '--self-check']\n"
        "try:\n"
        f"    runpy.run_path({str(SCRIPT)!r}, run_name='__main__')\n"
        "except SystemExit as done:\n"
        "    code = done.code\n"
        "out = sys.stdout.getvalue()\n"
        "sys.stdout = sys.__stdout__\n"
        "print(code, out.splitlines()[-1])\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "0 self-check passed", done.stderr
