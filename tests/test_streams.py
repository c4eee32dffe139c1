"""Where the output goes: streams that are closed, full or abandoned by their reader, and
text from the provider that must not reach a terminal raw.

Most broken-stream tests start real processes, because what they pin happens at the process
boundary (the exit code, and what the interpreter prints while shutting down). They prefer
--self-check and configuration errors, which start in ~50 ms without importing openai; the
online answer's exit code, decided inside main(), is checked in-process.
"""

import contextlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import lesson_03_tool_calling_loop as lesson
from tests.provider_server import Reply, completion, tool_call

SCRIPT = Path(lesson.__file__).resolve()
KEY = "sk-streams-secret-0123456789"
OUTPUT_FAILED = "[Harness] 输出没能写完"
PYTHON_NOISE = ("Traceback", "Exception ignored")
# Closed descriptors come from `sh -c 'exec ... >&-'` and abandoned pipes from os.pipe():
# any POSIX system. Only ENOSPC needs /dev/full, which macOS lacks.
needs_posix = pytest.mark.skipif(os.name != "posix", reason="needs POSIX pipes and sh")
needs_dev_full = pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")


def environment(**variables):
    """This process's environment without any OPENAI_* variable, plus `variables`.

    PYTHONUNBUFFERED goes too: a user's stdout is block-buffered, so a failed write can
    still be waiting in the buffer when the interpreter flushes it on the way out.
    """
    env = {name: value for name, value in os.environ.items() if not name.startswith("OPENAI_")}
    env.pop("PYTHONUNBUFFERED", None)
    env.update(variables)
    return env


def online(provider):
    """main()'s environment for an in-process run against `provider`."""
    return {"OPENAI_API_KEY": KEY, "OPENAI_MODEL": "m", "OPENAI_BASE_URL": provider.base_url}


def noise(stderr):
    return [marker for marker in PYTHON_NOISE if marker in stderr]


@contextlib.contextmanager
def broken(stream, kind):
    """subprocess.run() arguments that give the child a broken `stream` ("stdout"/"stderr").

    reader-left: a pipe whose read end is already closed, like `| head -c1` after it exited;
    full: /dev/full, where every write fails with ENOSPC; closed: the descriptor is closed
    (the shell's `>&-`), so the interpreter starts with sys.stdout or sys.stderr = None.
    """
    if kind == "reader-left":
        read_end, write_end = os.pipe()
        os.close(read_end)
        try:
            yield {stream: write_end}
        finally:
            os.close(write_end)
    elif kind == "full":
        with open("/dev/full", "wb") as full:
            yield {stream: full}
    else:
        yield {"close": {"stdout": 1, "stderr": 2}[stream]}


def run_script(args, env, *, stdout=subprocess.PIPE, stderr=subprocess.PIPE, close=None):
    """Run the script as a process; close=1 or 2 closes that descriptor before it starts."""
    command = [sys.executable, str(SCRIPT), *args]
    if close is not None:
        command = ["sh", "-c", f'exec "$@" {close}>&-', "sh", *command]
    return subprocess.run(
        command, stdout=stdout, stderr=stderr, env=env, timeout=60, encoding="utf-8"
    )


# ---------------------------------------------------------------------------
# stdout that cannot be written
# ---------------------------------------------------------------------------


BUFFERING = pytest.mark.parametrize(
    "buffering", [{}, {"PYTHONUNBUFFERED": "1"}], ids=["buffered", "unbuffered"]
)
BROKEN_STDOUT = pytest.mark.parametrize(
    "kind", ["reader-left", pytest.param("full", marks=needs_dev_full), "closed"]
)


@needs_posix
@BUFFERING
@BROKEN_STDOUT
def test_a_self_check_that_cannot_write_its_result_exits_4(kind, buffering):
    with broken("stdout", kind) as streams:
        done = run_script(["--self-check"], environment(**buffering), **streams)
    assert (done.returncode, OUTPUT_FAILED in done.stderr) == (4, True), done.stderr


@needs_posix
@BUFFERING
@BROKEN_STDOUT
def test_a_self_check_that_cannot_write_its_result_prints_no_python_noise(kind, buffering):
    with broken("stdout", kind) as streams:
        done = run_script(["--self-check"], environment(**buffering), **streams)
    assert done.stderr and noise(done.stderr) == [], done.stderr


class ReaderLeft:
    """stdout after its reader left (`| head -c1`), in-process: the interpreter-exit part is
    proven by the self-check processes above; what the online path adds is main()'s choice of
    exit code. Buffered, a write lands in the buffer and the flush fails; unbuffered, both do."""

    encoding = "utf-8"

    def __init__(self, buffered):
        self.buffered = buffered

    def write(self, text):
        if not self.buffered:
            raise BrokenPipeError(32, "Broken pipe")
        return len(text)

    def flush(self):
        raise BrokenPipeError(32, "Broken pipe")


@pytest.fixture(params=[True, False], ids=["buffered", "unbuffered"])
def run_reader_left(request, provider, capsys, monkeypatch):
    """Run main() online against `provider` with a stdout whose reader has left."""

    def runner(args):
        monkeypatch.setattr(sys, "stdout", ReaderLeft(request.param))
        env = online(provider)
        code = lesson.main(args, env)
        monkeypatch.undo()
        return code, capsys.readouterr().err

    return runner


def test_a_successful_answer_whose_reader_left_exits_4(run_reader_left, provider):
    provider.script(completion(content="42"))
    code, err = run_reader_left([])
    assert (code, err.startswith(OUTPUT_FAILED), len(err.splitlines())) == (4, True, 2), err
    assert len(provider.requests) == 1  # the answer really came and was lost on the way out


def test_a_stopped_loop_whose_reader_left_keeps_the_loops_exit_code(run_reader_left, provider):
    provider.script(completion(content="248 乘以", finish_reason="length"))
    code, err = run_reader_left(["--show-messages"])
    assert (code, err.startswith("[Model] step 1: "), OUTPUT_FAILED in err) == (1, True, False), err


# ---------------------------------------------------------------------------
# stderr that cannot be written: the failure's own exit code survives
# ---------------------------------------------------------------------------


@needs_posix
@pytest.mark.parametrize("kind", ["reader-left", "closed"])
def test_a_configuration_report_that_cannot_be_written_keeps_exit_2(kind):
    with broken("stderr", kind) as streams:
        done = run_script([], environment(), **streams)
    assert (done.returncode, done.stdout) == (2, "")


@pytest.mark.parametrize(
    "stderr", [ReaderLeft(True), ReaderLeft(False), None], ids=["buffered", "unbuffered", "closed"]
)
def test_a_request_failure_whose_report_cannot_be_written_keeps_exit_3(
    provider, capsys, monkeypatch, stderr
):
    # In-process, like the stdout cases above: the processes above prove the interpreter's exit
    provider.script(Reply(status=400, json={"error": {"message": "bad request"}}))  # no retry
    monkeypatch.setattr(sys, "stderr", stderr)
    env = online(provider)
    code = lesson.main([], env)
    monkeypatch.undo()
    assert (code, capsys.readouterr().out, len(provider.requests)) == (3, "", 1)


# ---------------------------------------------------------------------------
# Terminal safety: provider text is printed with its control characters escaped
# ---------------------------------------------------------------------------

# Written out here rather than taken from the script: C0 controls but \t and \n, DEL, C1,
# and the bidirectional controls (ALM, LRM, RLM, LRE..RLO, LRI..PDI).
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f\x80-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
# CSI as one C1 byte, an OSC title sequence ended by BEL, OSC, ST, RLO and LRI, DEL
HOSTILE = "\x9b31m\x1b]0;x\x07\x9d\x9c\u202e\u2066\u061c\u200e\u200f\x7f\rX"
SIX_BY_SEVEN = '{"a":6,"b":7}'


def calls(*tool_calls):
    return completion(tool_calls=list(tool_calls), finish_reason="tool_calls")


ANSWERED = {
    "answer": [completion(content=f"6 乘以 7 等于 42{HOSTILE}")],
    "tool-id": [calls(tool_call(f"call_{HOSTILE}", "multiply", SIX_BY_SEVEN)), completion("42")],
    "tool-name": [calls(tool_call("call_1", f"multiply{HOSTILE}", SIX_BY_SEVEN)), completion("42")],
    "argument-key": [
        calls(tool_call("call_1", "multiply", json.dumps({"a": 6, "b": 7, f"c{HOSTILE}": 1}))),
        completion("42"),
    ],
}
STOPPED = {
    "refusal": ([completion(content=None, refusal=f"不能回答{HOSTILE}")], 1),
    "http-error": ([Reply(status=400, json={"error": {"message": f"bad{HOSTILE}"}})], 3),
}
ALL_CASES = {**{name: (replies, 0) for name, replies in ANSWERED.items()}, **STOPPED}


@pytest.fixture
def run_hostile(provider, capsys):
    """Run main() in-process with --show-messages against these replies; return (code, out, err)."""

    def runner(replies):
        provider.script(*replies)
        env = online(provider)
        code = lesson.main(["--show-messages"], env)
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return runner


@pytest.mark.parametrize(("replies", "code"), ALL_CASES.values(), ids=ALL_CASES.keys())
def test_provider_text_reaches_the_terminal_escaped_not_raw(run_hostile, replies, code):
    got, out, err = run_hostile(replies)
    shown = out + err
    raw = sorted({f"U+{ord(char):04X}" for char in UNSAFE.findall(shown)})
    # "\u202e" written out proves the hostile text was printed, not dropped
    assert (got, raw, "\\u202e" in shown) == (code, [], True), shown


@pytest.mark.parametrize("replies", ANSWERED.values(), ids=ANSWERED.keys())
def test_show_messages_prints_the_exact_history_as_json_after_escaping(
    run_hostile, provider, replies
):
    code, out, _ = run_hostile(replies)
    lines = out.splitlines()
    answer_line = next(i for i, line in enumerate(lines) if line.startswith("Agent> "))
    history = json.loads("\n".join(lines[answer_line + 1 :]))
    final = replies[-1]["choices"][0]["message"]["content"]
    sent = provider.requests[-1].body["messages"]
    assert (code, history) == (0, [*sent, {"role": "assistant", "content": final}])
