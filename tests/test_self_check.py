"""The offline self-check: runs under -O, imports no openai, catches planted bugs."""

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "lesson_03_tool_calling_loop.py"


def self_check(script=SCRIPT, *flags):
    return subprocess.run(
        [sys.executable, *flags, str(script), "--self-check"],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("flags", [(), ("-O",), ("-OO",)], ids=["plain", "-O", "-OO"])
def test_self_check_passes(flags):
    done = self_check(SCRIPT, *flags)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[-1] == "self-check passed"
    assert len(lines) >= 8 and all(" ok  " in line for line in lines[:-1])
    assert done.stderr == ""


def test_self_check_never_imports_openai(tmp_path):
    # A poisoned openai package on the path: importing it at all fails the run.
    poisoned = tmp_path / "openai"
    poisoned.mkdir()
    (poisoned / "__init__.py").write_text("raise SystemExit('self-check imported openai')\n")
    probe = (
        "import runpy, sys\n"
        f"sys.path.insert(0, {str(tmp_path)!r})\n"
        f"sys.argv = [{str(SCRIPT)!r}, '--self-check']\n"
        "try:\n"
        f"    runpy.run_path({str(SCRIPT)!r}, run_name='__main__')\n"
        "except SystemExit as done:\n"
        "    code = done.code\n"
        "print('openai' in sys.modules, code)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.stdout.splitlines()[-1] == "False 0", done.stdout + done.stderr


def test_the_script_has_no_assert_statements():
    tree = ast.parse(SCRIPT.read_text(encoding="utf-8"))
    assert [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Assert)] == []


PLANTED_BUGS = {
    "bool accepted": (
        "isinstance(value, bool) or not isinstance(value, int)",
        "not isinstance(value, int)",
    ),
    "range unchecked": ("abs(value) > MAX_ABS_VALUE", "False"),
    "duplicate keys take the last": ("if repeated:", "if False:"),
    "extra keys allowed": (
        'if set(arguments) != {"a", "b"}:',
        'if not {"a", "b"} <= set(arguments):',
    ),
    "length passed off as final": (
        'elif finish_reason != "stop":',
        'elif finish_reason not in ("stop", "length"):',
    ),
    "tool calls run whatever the finish_reason": (
        'if tool_calls and finish_reason != "tool_calls":',
        "if False:",
    ),
    "missing ids accepted": ("if not is_text(call_id) or not call_id:", "if False:"),
    "tool_call_id dropped": ('"tool_call_id": call.id', '"tool_call_id": ""'),
    "one request too many": ("range(1, MAX_STEPS + 1)", "range(1, MAX_STEPS + 2)"),
    "loose JSON": ('separators=(",", ":")', 'separators=(", ", ": ")'),
}


@pytest.mark.parametrize(("original", "planted"), PLANTED_BUGS.values(), ids=PLANTED_BUGS.keys())
def test_self_check_under_python_O_catches_a_planted_bug(tmp_path, original, planted):
    source = SCRIPT.read_text(encoding="utf-8")
    assert source.count(original) == 1, f"mutation anchor not found once: {original}"
    mutant = tmp_path / SCRIPT.name
    mutant.write_text(source.replace(original, planted), encoding="utf-8")
    done = self_check(mutant, "-O")
    assert done.returncode == 1, done.stdout
    assert "失败" in done.stderr and done.stderr.splitlines()[-1] == "self-check failed"
    assert "Traceback" not in done.stderr


def test_a_reader_that_leaves_early_causes_no_traceback():
    read_end, write_end = os.pipe()
    os.close(read_end)  # like `| head -c1` having already exited
    try:
        done = subprocess.run(
            [sys.executable, str(SCRIPT), "--self-check"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write_end)
    assert done.returncode == 0
    assert "Traceback" not in done.stderr


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
