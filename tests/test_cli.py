"""The command line before any request: usage and config errors exit 2 with one clear line."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "lesson_03_tool_calling_loop.py"
KEY = "sk-cli-secret-0123456789"


def run_cli(*args, env=None, pythonpath=None):
    base = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    if pythonpath:
        base["PYTHONPATH"] = str(pythonpath)
    base.update(env or {})
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=base, timeout=60
    )


def assert_clean_failure(done, code):
    assert done.returncode == code, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert 1 <= len(done.stderr.splitlines()) <= 2
    assert KEY not in done.stdout + done.stderr


@pytest.mark.parametrize(
    ("env", "missing"),
    [
        ({}, "OPENAI_API_KEY"),
        ({"OPENAI_MODEL": "m"}, "OPENAI_API_KEY"),
        ({"OPENAI_API_KEY": KEY}, "OPENAI_MODEL"),
        ({"OPENAI_API_KEY": KEY, "OPENAI_MODEL": "   "}, "OPENAI_MODEL"),
    ],
)
def test_a_missing_variable_exits_2_and_names_it(env, missing):
    done = run_cli(env=env)
    assert_clean_failure(done, 2)
    assert f"[Harness] 缺少环境变量 {missing}" in done.stderr
    assert done.stdout == ""


@pytest.mark.parametrize(
    ("extra", "part"),
    [
        ({"OPENAI_BASE_URL": "localhost:11434/v1"}, "http://"),
        ({"OPENAI_BASE_URL": "https://api.example.com/v1/chat/completions"}, "/chat/completions"),
        ({"OPENAI_TIMEOUT": "soon"}, "OPENAI_TIMEOUT"),
        ({"OPENAI_TIMEOUT": "0"}, "OPENAI_TIMEOUT"),
        ({"OPENAI_TIMEOUT": "nan"}, "OPENAI_TIMEOUT"),
        ({"OPENAI_API_KEY": KEY + "“"}, "OPENAI_API_KEY"),
        ({"OPENAI_API_KEY": "sk-abc def-0123456789"}, "OPENAI_API_KEY"),
    ],
)
def test_bad_configuration_exits_2(extra, part):
    done = run_cli(env={"OPENAI_API_KEY": KEY, "OPENAI_MODEL": "m", **extra})
    assert_clean_failure(done, 2)
    assert done.stderr.startswith("[Harness] ") and part in done.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("--selfcheck",),
        ("-self-check",),
        ("-help",),
        ("-x",),
        ("two", "questions"),
        ("",),
        ("   ",),
        (b"\xff\xfe",),
    ],
)
def test_bad_arguments_exit_2_with_usage(args):
    done = run_cli(*args)
    assert done.returncode == 2
    assert "参数错误" in done.stderr and "用法" in done.stderr


def test_help_exits_0():
    done = run_cli("--help")
    assert done.returncode == 0 and done.stdout.startswith("用法")


def test_openai_not_installed_exits_2_with_the_install_command(tmp_path):
    (tmp_path / "openai").mkdir()
    (tmp_path / "openai" / "__init__.py").write_text(
        "raise ImportError('No module named openai')\n"
    )
    done = run_cli(env={"OPENAI_API_KEY": KEY, "OPENAI_MODEL": "m"}, pythonpath=tmp_path)
    assert_clean_failure(done, 2)
    assert "没有安装 openai" in done.stderr and "pip install -r requirements.txt" in done.stderr


def test_a_model_name_that_cannot_be_encoded_exits_2():
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    env = {k.encode(): v.encode() for k, v in env.items()}
    env.update({b"OPENAI_API_KEY": KEY.encode(), b"OPENAI_MODEL": b"gpt-\xff"})
    done = subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, env=env, timeout=60
    )
    assert_clean_failure(done, 2)
    assert "OPENAI_MODEL" in done.stderr
