"""README's "动手改一改": each one-line edit, made to a copy, is caught by the line shown.

An edit is anchored by the definition it is in and its original text (what a learner finds with
the editor's search), not by a line number: editing the file above it must not move it."""

import ast
import contextlib
import importlib.util
import io
import re
from pathlib import Path

import pytest

import lesson_03_tool_calling_loop as lesson

SCRIPT = Path(lesson.__file__).resolve()
SOURCE = SCRIPT.read_text(encoding="utf-8")
README = (SCRIPT.parent / "README.md").read_text(encoding="utf-8")
SECTION = README.split("\n## 动手改一改\n", 1)[-1].split("\n## ", 1)[0]
ITEM = re.compile(
    r"^(?P<number>\d+)\. \*\*(?P<title>.+?)\*\*（`(?P<where>\w+)(?:\(\))?`）：.*\n"
    r"   - 原文：`(?P<original>[^`]+)`\n"
    r"   - 改成：`(?P<edited>[^`]+)`\n"
    r"   - 自检：`(?P<caught>[^`]+)`$",
    flags=re.MULTILINE,
)
EXERCISES = [match.groupdict() for match in ITEM.finditer(SECTION)]
IDS = [f"edit{exercise['number']}" for exercise in EXERCISES]


def run_copy(tmp_path: Path, source: str, argv: list) -> tuple:
    """Load an edited copy of the script as its own module and run its main() in this process."""
    path = tmp_path / "try.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(f"try_{tmp_path.name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = module.main(argv, {})
    return code, out.getvalue(), err.getvalue()


def edited(exercise: dict) -> str:
    original = exercise["original"]
    assert SOURCE.count(original) == 1, f"原文 not found exactly once: {original}"
    return SOURCE.replace(original, exercise["edited"])


def test_the_section_lists_at_least_six_edits_and_every_item_parses():
    # An item that does not match the format would otherwise drop out of the tests silently.
    numbered = re.findall(r"^\d+\. ", SECTION, flags=re.MULTILINE)
    assert len(EXERCISES) == len(numbered) >= 6
    assert [int(e["number"]) for e in EXERCISES] == list(range(1, len(EXERCISES) + 1))


def test_part_twos_banner_points_at_the_section():
    (banner,) = [line for line in SOURCE.splitlines() if re.match(r"# =+ 第二部分", line)]
    assert "动手改一改" in banner and "README" in banner
    assert "\n## 动手改一改\n" in README


def test_an_unedited_copy_passes(tmp_path):
    # The control: loading a copy as a module does not by itself make the self-check fail.
    code, out, err = run_copy(tmp_path, SOURCE, ["--self-check"])
    assert (code, out.splitlines()[-1], err) == (0, "self-check passed", "")


def definition(name):
    """The source text of the top-level function, class or assignment called `name`."""
    for node in ast.parse(SOURCE).body:
        targets = getattr(node, "targets", [])
        if getattr(node, "name", None) == name or any(
            getattr(t, "id", "") == name for t in targets
        ):
            return ast.get_source_segment(SOURCE, node)
    raise AssertionError(f"README names {name}, which the script does not define")


@pytest.mark.parametrize("exercise", EXERCISES, ids=IDS)
def test_the_original_text_is_inside_the_definition_the_readme_names(exercise):
    edited(exercise)  # found exactly once in the file
    assert exercise["original"] in definition(exercise["where"])
    assert exercise["edited"] != exercise["original"]


@pytest.mark.parametrize("exercise", EXERCISES, ids=IDS)
def test_the_self_check_of_the_edited_copy_prints_exactly_the_readme_line(tmp_path, exercise):
    code, _, err = run_copy(tmp_path, edited(exercise), ["--self-check"])
    assert (code, err.splitlines()) == (1, [exercise["caught"], "self-check failed"])


def test_the_demo_claim_holds_half_generated_arguments_reach_the_router(tmp_path):
    # README: after edit 7 the half-generated arguments reach the Router, and the loop asks for a
    # response the scene never scripted: --demo then shows the learner's bug, with its traceback
    number = re.search(r"第 (\d+) 处改完，第三个场景里只生成了一半的参数", SECTION).group(1)
    exercise = EXERCISES[int(number) - 1]
    _, original_demo, _ = run_copy(tmp_path, SOURCE, ["--demo"])
    code, out, err = run_copy(tmp_path, edited(exercise), ["--demo"])
    third = out.split("== 场景 3/", 1)[1].splitlines()
    assert third[2].startswith("step 1: multiply call_id=call_1 result=")
    assert "step 1: multiply" not in original_demo.split("== 场景 3/", 1)[1].split("== 场景 4/")[0]
    assert code == 1 and err.startswith("[Harness] ") and "Traceback" in err
