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


def test_run_agent_fits_on_a_screen_and_shows_the_rules():
    (node,) = [n for n in TREE.body if isinstance(n, ast.FunctionDef) and n.name == "run_agent"]
    assert node.end_lineno - node.lineno + 1 <= 45
    body = "\n".join(LINES[node.lineno - 1 : node.end_lineno])
    for rule in (
        "range(1, MAX_STEPS + 1)",
        "choice = response.choices[0]",
        'if finish_reason not in ("tool_calls", "stop"):',
        'if finish_reason != "stop":',
        "len(set(ids)) < len(ids)",
        '"tool_call_id": call.id',
        "reply = message.tool_calls or [], assistant_message_from_api(message)",
    ):
        assert rule in body, rule
    # the assistant message is stored before the results that answer it
    assert "messages.append(reply)  # 先存 assistant" in body
    assert body.index("messages.append(reply)  # 先存") < body.index("for call in tool_calls:\n")


# Part 1 may call into the appendix only to format text or to diagnose a failure; what a rule
# means is written in part 1 itself. Adding a name here is a design decision, not a test fix.
PART_3_NAMES_PART_1_MAY_USE = {
    # formatting: bounded, safe text for a person
    "clip",
    "shown_value",
    "json_type_name",
    # diagnosis: turn a failure into the link, the reason and what to check
    "explain_request_failure",
    "explain_finish_reason",
    "check_response_shape",
    "looks_like_tool_call_text",
    "HINT_ENDPOINT",
    "HINT_TOO_MANY",
    "HINT_MAX_STEPS",
    "HINT_REFUSAL",
    "HINT_EMPTY_ANSWER",
    "HINT_CALL_AS_TEXT",
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
