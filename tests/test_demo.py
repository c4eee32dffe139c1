"""--demo: REFERENCE shows its real output byte for byte, README its opening lines; it needs no
openai and survives -O."""

import contextlib
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import lesson_03_tool_calling_loop as lesson

SCRIPT = Path(lesson.__file__).resolve()
README = SCRIPT.parent / "README.md"
REFERENCE = SCRIPT.parent / "REFERENCE.md"
ARTICLE_LINES = [  # the article's run, as printed in the lesson text
    "step 1: finish_reason=tool_calls",
    'step 1: multiply call_id=call_1 result={"status":"completed","result":3720}',
    "step 2: finish_reason=stop",
    "Agent> 248 乘以 15 等于 3720。",
]


@pytest.fixture(scope="module")
def demo_output():
    """Exit code, stdout and stderr of main(["--demo"], {}) run in this process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = lesson.main(["--demo"], {})
    return code, out.getvalue(), err.getvalue()


def reference_demo_block() -> str:
    # Bytes, not read_text(): universal newlines would hide a \r\n in the document.
    text = REFERENCE.read_bytes().decode("utf-8")
    fence = text.split("## `--demo` 的完整输出", 1)[1].split("\n```", 2)
    assert fence[1].startswith("\n"), "the output block opens with a bare ``` fence"
    return fence[1][1:] + "\n"


def test_the_reference_shows_the_demo_output_byte_for_byte(demo_output):
    code, out, err = demo_output
    assert (code, err) == (0, "")
    assert reference_demo_block() == out


def test_the_readme_shows_the_demos_real_first_lines(demo_output):
    text = README.read_bytes().decode("utf-8").split("## 不用 key，先看 Loop 真跑一遍", 1)[1]
    shown = re.search(r"^```\n(== 场景.*?)^```", text, flags=re.S | re.M)[1]
    assert len(shown.splitlines()) >= 4 and demo_output[1].startswith(shown)


def test_the_first_scene_is_the_articles_run_and_its_four_message_history(demo_output):
    scenes = demo_output[1].split("\n\n== 场景 ")
    assert len(scenes) == 4
    title, *lines = scenes[0].splitlines()
    assert title.startswith("== 场景 1/4：§4 ")
    assert lines[:4] == ARTICLE_LINES
    history = json.loads("\n".join(lines[4:]))
    assert [message["role"] for message in history] == ["user", "assistant", "tool", "assistant"]
    assert history[2]["tool_call_id"] == history[1]["tool_calls"][0]["id"] == "call_1"


@pytest.fixture(scope="module")
def poisoned_openai(tmp_path_factory):
    """A folder whose openai package kills the interpreter (exit 97) the moment it is imported.

    os._exit, not an exception: no except clause in the script can swallow it.
    """
    folder = tmp_path_factory.mktemp("poisoned")
    (folder / "openai").mkdir()
    (folder / "openai" / "__init__.py").write_text("import os\nos._exit(97)\n")
    return folder


def run_with_poison(folder, *args):
    env = {**os.environ, "PYTHONPATH": str(folder)}
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=60, env=env
    )


def test_the_poison_bites(poisoned_openai):
    # Guards the next test against passing vacuously: PYTHONPATH shadows the real SDK.
    assert run_with_poison(poisoned_openai, "-c", "import openai").returncode == 97


def test_the_demo_under_python_O_never_imports_openai(poisoned_openai, demo_output):
    done = run_with_poison(poisoned_openai, "-O", str(SCRIPT), "--demo")
    assert (done.returncode, done.stderr, done.stdout) == (0, "", demo_output[1])


def test_the_output_opens_with_the_first_scene_and_each_scene_ends_with_one_blank_line(
    demo_output,
):
    out = demo_output[1]
    assert out.startswith("== 场景 1/4：")
    scenes = re.split(r"(?m)^(?=== 场景 )", out)[1:]
    assert len(scenes) == 4
    assert all(scene.endswith("\n\n") and not scene.endswith("\n\n\n") for scene in scenes)


def test_the_third_scene_stops_at_length_and_runs_no_tool(demo_output):
    third = demo_output[1].split("== 场景 3/4", 1)[1].split("== 场景 4/4", 1)[0]
    title, stepped, stopped, *_ = third.splitlines()
    assert "length" in title
    assert stepped == "step 1: finish_reason=length"
    assert stopped.startswith("[Model] step 1: ") and '"length"' in stopped
    assert "call_id=" not in third and "Agent>" not in third
