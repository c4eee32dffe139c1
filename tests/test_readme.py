"""README and REFERENCE promises that code must keep: the two set-up commands, the function map,
the exit codes, the version matrix CI runs, the llama.cpp recipe, and README as a short path."""

import builtins
import re
from pathlib import Path

import lesson_03_tool_calling_loop as lesson

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
REFERENCE = (ROOT / "REFERENCE.md").read_text(encoding="utf-8")


def section(text, heading):
    """The body of a markdown section: from `heading` to the next heading of the same level."""
    level = heading.split(" ", 1)[0]
    return text.split(f"\n{heading}", 1)[1].split(f"\n{level} ", 1)[0]


def test_every_function_in_the_article_map_exists():
    mapping = section(REFERENCE, "## 课文与代码的对照")
    # eval() is named there as what the lesson refuses to use, not as a function of ours
    names = [name for name in re.findall(r"`(\w+)\(\)`", mapping) if name not in vars(builtins)]
    assert len(names) >= 10
    assert [name for name in names if not callable(getattr(lesson, name, None))] == []


def test_the_two_set_up_commands_are_the_ones_ci_runs():
    block = README.split("## 两条命令", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    commands = [line for line in block.splitlines() if line and not line.startswith("#")]
    assert commands == [
        "python3 lesson_03_tool_calling_loop.py --self-check",
        "python3 -m venv .venv && . .venv/bin/activate"
        " && python -m pip install -r requirements-dev.txt && python -m pytest",
    ]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert f"\n{commands[1]}\n" in ci


def readme_version_table():
    """README's table: {python: openai pattern pip must pick}, and the extra runs' patterns."""
    table = REFERENCE.split("## 支持的 Python 与 openai 版本", 1)[1].split("\n\n", 2)[1]
    picks, extras = {}, []
    for row in table.splitlines()[2:]:
        pythons, picked, tested = (cell.strip() for cell in row.strip("|").split("|"))
        first, _, last = pythons.partition("–")
        minors = range(int(first.split(".")[1]), int((last or first).split(".")[1]) + 1)
        pattern = re.match(r"(\d+\.\d+\.\d+|\d+\.x)", picked).group(1).replace("x", "*")
        picks.update({f"3.{minor}": pattern for minor in minors})
        for python, listed in re.findall(r"另在 (3\.\d+) 上测 ([^（]+)", tested):
            versions = [re.match(r"(\d+\.x|\d+(?:\.\d+)*)", v).group(1) for v in listed.split("、")]
            extras += [(python, v.replace("x", "*")) for v in versions]
    return picks, extras


def test_ci_asserts_the_python_and_openai_pairs_the_readme_lists():
    picks, extras = readme_version_table()
    assert picks == {"3.9": "2.48.0", **{f"3.{m}": "3.*" for m in range(10, 14)}}, picks
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert re.search(r"^versions=\((.*)\)$", ci, re.M).group(1).split() == list(picks)
    pick = re.search(r"^openai_pick\(\) \{ case \$1 in (.*); esac; \}$", ci, re.M).group(1)
    cases = dict(re.findall(r'(\S+)\) echo "([^"]+)"', pick))
    assert {python: cases.get(python, cases["*"]) for python in picks} == picks, pick
    (python,) = re.findall(r"^extra_python=(\S+)$", ci, re.M)
    runs = re.search(r"^extra_runs=\((.*)\)$", ci, re.M).group(1)
    assert [(python, want) for _, want in re.findall(r'"([^|"]+)\|([^"]+)"', runs)] == extras


def test_the_exit_code_table_matches_the_help_text():
    table = section(REFERENCE, "## 退出码")
    codes = re.findall(r"^\| (\d+) \|", table, flags=re.MULTILINE)
    assert codes == ["0", "1", "2", "3", "130"]
    help_codes = re.findall(r"(\d+) [^\d；]", lesson.HELP.split("退出码：", 1)[1])
    assert help_codes == codes
    named = {int(c) for c in codes} - {130}
    assert named == {value for name, value in vars(lesson).items() if name.startswith("EXIT_")}


def test_the_readme_shows_the_self_checks_real_last_lines(capsys):
    shown = README.split("自检的结尾应是：", 1)[1].split("```", 2)[1].strip().splitlines()
    code = lesson.self_check()
    printed = capsys.readouterr().out.splitlines()
    assert (code, printed[-2:]) == (0, shown)


def test_the_self_check_runs_as_many_checks_as_the_readme_says(capsys):
    (count,) = re.findall(r"运行 (\d+) 组检查", REFERENCE)
    lesson.self_check()
    printed = capsys.readouterr().out.splitlines()
    numbers = [re.match(r"\[(\d+)/(\d+)\] ok  \S", line).groups() for line in printed[:-1]]
    assert numbers == [(str(n), count) for n in range(1, int(count) + 1)], printed


def llama_cpp_recipe():
    """README's local recipe: the shell block under its heading, and the llama-server arguments."""
    recipe = section(README, "### 本机 llama.cpp：照抄就能跑的组合")
    block = recipe.split("```bash\n", 1)[1].split("```", 1)[0]
    (command,) = [line.split() for line in block.splitlines() if line.startswith("llama-server ")]
    return block, command


def test_the_verified_llama_cpp_recipe_loads_the_template_that_ships_here_from_any_directory():
    block, args = llama_cpp_recipe()
    assert "--jinja" in args and "--no-jinja" not in args
    template = args[args.index("--chat-template-file") + 1].strip('"')
    # the path is absolute once the recipe's own REPO line has run, so the directory does not matter
    assert template.startswith("$REPO/") and 'REPO="$(git rev-parse --show-toplevel' in block
    assert (ROOT / template.removeprefix("$REPO/")).is_file()
    model = args[args.index("-m") + 1]
    assert model.endswith("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")
    assert f"-o {model} " in block  # the download is saved under the name the command loads
    port = args[args.index("--port") + 1]
    assert f'OPENAI_BASE_URL="http://127.0.0.1:{port}/v1"' in block
    failures = section(REFERENCE, "## 全部失败的对照表")
    assert template.removeprefix("$REPO/") in failures  # the call-as-text row points there too


def test_readme_is_a_short_path_and_every_link_into_the_reference_lands_on_a_heading():
    assert len(README.splitlines()) <= 300
    anchors = {
        re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        for heading in re.findall(r"^#+ (.+)$", REFERENCE, flags=re.MULTILINE)
    }
    links = re.findall(r"\(REFERENCE\.md#([^)]+)\)", README)
    assert links and [link for link in links if link not in anchors] == []


def test_the_template_teaches_the_call_format_it_renders():
    # llama-server derives its parser from how the template renders a call, while the model
    # writes what the system prompt shows it: the same fence opening must be in both places.
    _, args = llama_cpp_recipe()
    template = args[args.index("--chat-template-file") + 1].strip('"').removeprefix("$REPO/")
    source = (ROOT / template).read_text(encoding="utf-8")
    opening = "'```json" + "\\n" + '{"name": "'  # as the Jinja string literal spells it
    history_starts = source.index("{%- for message in messages %}")
    assert source.count(opening) == 2
    assert source.index(opening) < history_starts < source.rindex(opening)


def script_dependencies():
    """The dependencies of the script's own PEP 723 block (`# /// script` ... `# ///`)."""
    source = (ROOT / "lesson_03_tool_calling_loop.py").read_text(encoding="utf-8")
    block = re.search(r"^# /// script\n((?:#.*\n)*?)# ///$", source, flags=re.M)[1]
    (listed,) = re.findall(r"^# dependencies = \[(.*)\]$", block, flags=re.M)
    return re.findall(r'"([^"]+)"', listed)


def test_the_scripts_own_metadata_lists_exactly_what_requirements_txt_installs():
    # `uv run lesson_03_tool_calling_loop.py` installs from the block, pip from the file
    lines = (ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines()
    required = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    assert required and script_dependencies() == required
    assert any(name.startswith("socksio") for name in required)  # socks5:// proxies work


def test_the_readme_offers_uv_run_on_the_script_itself():
    online = section(README, "## 在线运行：选一个 Provider")
    assert "`uv run lesson_03_tool_calling_loop.py`" in online
    assert "`uv run lesson_03_tool_calling_loop.py`" in section(README, "## English")
