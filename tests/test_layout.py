"""The file reads as the lesson: three parts, the article's sections in order, no forward use."""

import ast
import re
from pathlib import Path

import lesson_03_tool_calling_loop as lesson

SOURCE = Path(lesson.__file__).read_text(encoding="utf-8")
LINES = SOURCE.splitlines()
APPENDIX = next(n for n, line in enumerate(LINES, 1) if "附录" in line)
TREE = ast.parse(SOURCE)


def banners(pattern):
    return [re.match(pattern, line).group(1) for line in LINES if re.match(pattern, line)]


def test_three_parts_in_order_and_the_appendix_banner_is_the_first_mention_of_it():
    assert banners(r"# =+ (第.部分)") == ["第一部分", "第二部分", "第三部分"]
    assert LINES[APPENDIX - 1].startswith("# ") and "第三部分" in LINES[APPENDIX - 1]


def test_the_lesson_sections_follow_the_articles_numbering_without_gaps():
    assert banners(r"# -+ §(\d) ") == ["1", "2", "3", "4", "5", "6", "7"]
    part_two = next(n for n, line in enumerate(LINES, 1) if re.match(r"# =+ 第二部分", line))
    assert all(n < part_two for n, line in enumerate(LINES, 1) if line.startswith("# ---- §"))


def top_level_definitions():
    for node in TREE.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            yield node.name, node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        yield name.id, node


def test_nothing_in_the_lesson_part_is_used_before_it_is_defined():
    defined_at = {name: node.lineno for name, node in top_level_definitions()}
    late = []
    for _, node in top_level_definitions():
        if node.lineno >= APPENDIX:
            continue
        for used in ast.walk(node):
            if isinstance(used, ast.Name) and isinstance(used.ctx, ast.Load):
                where = defined_at.get(used.id)
                if where is not None and node.lineno < where < APPENDIX:
                    late.append(f"{used.id} (line {where}) used at line {used.lineno}")
    assert late == []


def run_agent_node():
    (node,) = [n for n in TREE.body if isinstance(n, ast.FunctionDef) and n.name == "run_agent"]
    return node


def first_line(node, test):
    """Line of the first node under `node` for which test(n) holds."""
    return min(n.lineno for n in ast.walk(node) if test(n))


def test_run_agent_shows_the_articles_rules_in_the_articles_order():
    # No line cap (issue 19): each line does one thing. The rules must be visible in run_agent
    # itself, in order; test_loop checks that each one behaves.
    node = run_agent_node()
    source = ast.get_source_segment
    steps = first_line(
        node, lambda n: isinstance(n, ast.For) and "MAX_STEPS + 1" in source(SOURCE, n.iter)
    )
    request = first_line(node, lambda n: isinstance(n, ast.Attribute) and n.attr == "create")
    first_choice = first_line(
        node,
        lambda n: (
            isinstance(n, ast.Subscript)
            and isinstance(n.value, ast.Attribute)
            and n.value.attr == "choices"
            and isinstance(n.slice, ast.Constant)
            and n.slice.value == 0
        ),
    )
    final_needs_stop = first_line(
        node,
        lambda n: (
            isinstance(n, ast.Compare)
            and any(isinstance(c, ast.Constant) and c.value == "stop" for c in n.comparators)
        ),
    )
    calls_need_natural_end = first_line(
        node,
        lambda n: (
            isinstance(n, ast.Compare)
            and isinstance(n.ops[0], ast.NotIn)
            and "tool_calls" in source(SOURCE, n)
        ),
    )
    unique_ids = first_line(
        node, lambda n: isinstance(n, ast.Call) and source(SOURCE, n.func) == "set"
    )
    assistant_kept = first_line(  # the assistant message is appended before any tool result
        node,
        lambda n: (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr == "append"
            and n.lineno > unique_ids
            and not any(isinstance(arg, ast.Dict) for arg in n.args)
        ),
    )
    results = first_line(
        node, lambda n: isinstance(n, ast.For) and "tool_calls" in source(SOURCE, n.iter)
    )
    paired = first_line(
        node,
        lambda n: (
            isinstance(n, ast.Dict)
            and any(isinstance(k, ast.Constant) and k.value == "tool_call_id" for k in n.keys)
        ),
    )
    order = [
        steps,
        request,
        first_choice,
        calls_need_natural_end,
        unique_ids,
        assistant_kept,
        results,
        paired,
        final_needs_stop,
    ]
    assert order == sorted(order), order


# Part 1 may call into the appendix only to format text or to diagnose a failure; what a rule
# means is written in part 1 itself. Adding a name here is a design decision, not a test fix.
PART_3_NAMES_PART_1_MAY_USE = {
    # formatting: bounded text, a value shown visibly, the text of an answer without its reasoning
    "clip",
    "shown_value",
    "answer_text",
    # diagnosis behind a name that says what it does; part 1 says what each stop guards against
    "check_response_shape",
    "finish_reason_stop",
    "reject_call_written_as_text",
}


def test_part_1_uses_only_the_allowed_appendix_names():
    part_two = next(n for n, line in enumerate(LINES, 1) if re.match(r"# =+ 第二部分", line))
    appendix_names = {name for name, node in top_level_definitions() if node.lineno >= APPENDIX}
    used = {
        node.id
        for node in ast.walk(TREE)
        if isinstance(node, ast.Name) and node.lineno < part_two and node.id in appendix_names
    }
    assert used <= PART_3_NAMES_PART_1_MAY_USE, sorted(used - PART_3_NAMES_PART_1_MAY_USE)
