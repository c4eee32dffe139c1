"""The file reads as the lesson: three parts, the article's sections in order, no forward use in
the lesson, part 3 in the order a run meets the world; and the project's size budget, counted
as the before-stop hook counts it, the same on every Python."""

import ast
import io
import re
import tokenize
from pathlib import Path

import lesson_03_tool_calling_loop as lesson

SOURCE = Path(lesson.__file__).read_text(encoding="utf-8")
LINES = SOURCE.splitlines()
TREE = ast.parse(SOURCE)


def banner_line(word):
    """The first comment line naming `word` (the hook's `grep -n "^#.*word"`)."""
    return next(n for n, line in enumerate(LINES, 1) if re.match(rf"#.*{word}", line))


PART_TWO = banner_line("第二部分")
APPENDIX = banner_line("附录")  # part 3


def banners(pattern):
    return [re.match(pattern, line).group(1) for line in LINES if re.match(pattern, line)]


def test_three_parts_in_order_and_part_3_is_the_appendix():
    assert banners(r"# =+ (第.部分)") == ["第一部分", "第二部分", "第三部分"]
    assert re.match(r"# =+ 第三部分", LINES[APPENDIX - 1]), LINES[APPENDIX - 1]


def test_the_lesson_sections_follow_the_articles_numbering_without_gaps():
    assert banners(r"# -+ §(\d) ") == ["1", "2", "3", "4", "5", "6", "7"]
    assert all(n < PART_TWO for n, line in enumerate(LINES, 1) if re.match(r"# -+ §", line))


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


def test_nothing_in_parts_1_and_2_is_used_before_it_is_defined():
    # Read top to bottom, the lesson never points ahead; it calls into the appendix only to
    # format or diagnose (the appendix is allowed to come later: a reader can stop before it)
    defined_at = {}
    for name, node in top_level_definitions():
        defined_at.setdefault(name, node.lineno)
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


def test_part_3_banners_follow_a_run_through_the_world():
    # Issue 28: configuration, a request, bytes, a reply to judge, text for a person, the exit
    shown = [line[len("# ---- ") :] for line in LINES[APPENDIX:] if line.startswith("# ---- ")]
    assert [banner.split("：", 1)[0] for banner in shown] == [
        "配置进来",
        "请求失败",
        "字节变成回复",
        "回复是不是回答",
        "文字出去",
        "命令行",
    ]


def imports_openai(node):
    if isinstance(node, ast.Import):
        return any(alias.name.split(".")[0] == "openai" for alias in node.names)
    return isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "openai"


def test_openai_is_imported_only_inside_part_3_functions():
    # The self-check and the demo never import the SDK (test_self_check runs them without it)
    assert not any(imports_openai(node) for node in TREE.body)
    importers = [
        function
        for function in ast.walk(TREE)
        if isinstance(function, ast.FunctionDef) and any(map(imports_openai, ast.walk(function)))
    ]
    assert importers and all(function.lineno > APPENDIX for function in importers)


def test_the_script_has_no_assert_statements():
    # python -O removes assert statements; the self-check uses expect(), which it keeps
    assert any(isinstance(node, ast.If) for node in ast.walk(TREE))  # the walk sees statements
    assert [node.lineno for node in ast.walk(TREE) if isinstance(node, ast.Assert)] == []


# ---------------------------------------------------------------------------
# The budget (issues 28, 34), as the before-stop hook counts it. A change that does not meet
# it is a design decision, not a test fix.
# ---------------------------------------------------------------------------

PART_1_LINES = 280
PART_3_TOKENS, FILE_TOKENS = 2600, 6000
LONGEST_FUNCTION = 40  # lines, docstring included; run_agent, the lesson's loop, is exempt
# Issue 34 asks for about 15. Not met: 45 today, 14 of them the concept table's words and 18 the
# written-call rule's forms, one commented line each. Plain code for either costs tokens the
# 2,600 do not have (a regex is one token); the issue note names this. A ceiling, so it only falls.
PART_3_REGEX_LINES = 45
NOT_READ = {
    tokenize.NL,
    tokenize.NEWLINE,
    tokenize.INDENT,
    tokenize.DEDENT,
    tokenize.ENDMARKER,
    tokenize.COMMENT,
}


def code_tokens(source):
    """(kind, text, first line, last line) of each token a reader reads: no comments, line
    breaks or indentation. A docstring is one token, and so is an f-string, as on Python 3.11
    and earlier (3.12 splits it into pieces), so that the figures are the same everywhere."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    for token in tokens:
        kind, end = tokenize.tok_name[token.type], token.end
        if kind == "FSTRING_START":
            kind, depth = "STRING", 1
            while depth:  # its pieces, nested f-strings too, up to its own end
                piece = next(tokens)
                depth += {"FSTRING_START": 1, "FSTRING_END": -1}.get(
                    tokenize.tok_name[piece.type], 0
                )
            end = piece.end
        if token.type not in NOT_READ:
            yield kind, token.string, token.start[0], end[0]


def prefix(text):
    """The letters a token starts with: a string's prefix (r, f, rf), a name."""
    return re.match(r"[A-Za-z]*", text)[0].lower()


def test_an_f_string_is_one_code_token_on_every_python():
    source = 'x = f\'{a!r:>{width}} and {f"{b}"}\' + rf"\\d{n}"  # note\n'
    tokens = [(kind, prefix(text)) for kind, text, _, _ in code_tokens(source)]
    assert tokens == [("NAME", "x"), ("OP", ""), ("STRING", "f"), ("OP", ""), ("STRING", "rf")]


def test_part_1_fits_its_line_budget():
    assert PART_TWO - 1 <= PART_1_LINES


def test_part_3_and_the_file_fit_their_token_budgets():
    lines = [line for _, _, line, _ in code_tokens(SOURCE)]
    sizes = {"part 3": sum(line >= APPENDIX for line in lines), "file": len(lines)}
    assert sizes["part 3"] <= PART_3_TOKENS and sizes["file"] <= FILE_TOKENS, sizes


def test_no_function_is_longer_than_the_budget_except_run_agent():
    long = {
        node.name: node.end_lineno - node.lineno + 1
        for node in ast.walk(TREE)
        if isinstance(node, ast.FunctionDef)
        and node.end_lineno - node.lineno + 1 > LONGEST_FUNCTION
    }
    assert set(long) <= {"run_agent"}, long


RE_FUNCTIONS = {"compile", "search", "match", "fullmatch", "findall", "finditer", "sub", "split"}


def is_text(node):
    return isinstance(node, ast.JoinedStr) or isinstance(getattr(node, "value", None), str)


def regex_literal_lines():
    """Lines of part 3 holding a regular-expression literal: a raw string (r"…", rf"…"), text
    written into the pattern argument of a re function, or the value of a top-level name that
    such a pattern uses (TERMINAL_UNSAFE = "[\\x00-…]")."""
    spans = [
        (first, last)
        for kind, text, first, last in code_tokens(SOURCE)
        if kind == "STRING" and "r" in prefix(text)
    ]
    values = {}  # a top-level name: every value assigned or added to it
    for node in TREE.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            values.setdefault(node.targets[0].id, []).append(node.value)
        if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            values.setdefault(node.target.id, []).append(node.value)
    for call in ast.walk(TREE):
        if not (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and isinstance(call.func.value, ast.Name)
            and call.func.value.id == "re"
            and call.func.attr in RE_FUNCTIONS
            and call.args
        ):
            continue
        pattern = call.args[0]
        names = [n.id for n in ast.walk(pattern) if isinstance(n, ast.Name)]
        named = [value for name in names for value in values.get(name, [])]
        texts = [n for part in [pattern, *named] for n in ast.walk(part) if is_text(n)]
        spans += [(node.lineno, node.end_lineno) for node in texts]
    lines = {line for first, last in spans for line in range(first, last + 1)}
    return sorted(line for line in lines if line >= APPENDIX)


def test_few_lines_of_part_3_hold_regular_expressions():
    # Plain code before patterns (urlsplit names a URL's parts; a regex only matches them)
    lines = regex_literal_lines()
    assert len(lines) <= PART_3_REGEX_LINES, [f"{n}: {LINES[n - 1].strip()[:60]}" for n in lines]
