"""Where the output goes: stdout or stderr that is full or abandoned by its reader, and text
from the provider that must not reach a terminal raw.

Most broken-stream tests start real processes, because what they pin happens at the process
boundary (the exit code, and what the interpreter prints while shutting down). They prefer
--self-check and configuration errors, which start in ~50 ms without importing openai; a few
online runs (`| head`, a full stderr) go through the process too. The other online exit codes,
decided inside main(), are checked in-process, on a real pipe whose reader has left.
A descriptor closed before the start (`>&-`, so sys.stdout or sys.stderr is None) is not handled.
"""

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
from tests.provider_server import Reply, completion, tool_call

SCRIPT = Path(lesson.__file__).resolve()
KEY = "sk-streams-secret-0123456789"
PYTHON_NOISE = ("Traceback", "Exception ignored")
# Abandoned pipes come from os.pipe(): any POSIX system. Only ENOSPC needs /dev/full, which
# macOS lacks.
needs_posix = pytest.mark.skipif(os.name != "posix", reason="needs POSIX pipes")
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
    full: /dev/full, where every write fails with ENOSPC.
    """
    if kind == "reader-left":
        read_end, write_end = os.pipe()
        os.close(read_end)
        try:
            yield {stream: write_end}
        finally:
            os.close(write_end)
    else:
        with open("/dev/full", "wb") as full:
            yield {stream: full}


def run_script(args, env, *, stdout=subprocess.PIPE, stderr=subprocess.PIPE):
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        stdout=stdout,
        stderr=stderr,
        env=env,
        timeout=60,
        encoding="utf-8",
    )


# ---------------------------------------------------------------------------
# stdout that cannot be written
# ---------------------------------------------------------------------------


BUFFERING = pytest.mark.parametrize(
    "buffering", [{}, {"PYTHONUNBUFFERED": "1"}], ids=["buffered", "unbuffered"]
)
BROKEN = pytest.mark.parametrize(
    "kind", ["reader-left", pytest.param("full", marks=needs_dev_full)]
)


@needs_posix
@BUFFERING
@BROKEN
def test_a_self_check_that_cannot_write_its_result_keeps_its_own_exit_code(kind, buffering):
    # Lost output is not a failure of the run: the self-check passed, so it exits 0, silently
    with broken("stdout", kind) as streams:
        done = run_script(["--self-check"], environment(**buffering), **streams)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr


@needs_posix
@BUFFERING
@BROKEN
def test_a_self_check_that_cannot_write_its_result_prints_no_python_noise(kind, buffering):
    with broken("stdout", kind) as streams:
        done = run_script(["--self-check"], environment(**buffering), **streams)
    assert noise(done.stderr) == [], done.stderr


@needs_posix
def test_a_failing_self_check_that_cannot_write_its_result_still_exits_1(tmp_path):
    # The exit code is the run's own, not a constant 0: a self-check that fails after its
    # first "ok" lines were lost says so even when nobody reads its stdout (a copy of the
    # script whose multiply() is wrong for 6 x 7, the fourth check's second call)
    broken_copy = tmp_path / SCRIPT.name
    source = SCRIPT.read_text(encoding="utf-8")
    wrong = source.replace("    return a * b\n", "    return a * b + (b == 7)\n", 1)
    assert wrong != source
    broken_copy.write_text(wrong, encoding="utf-8")
    with broken("stdout", "reader-left") as streams:
        done = subprocess.run(
            [sys.executable, str(broken_copy), "--self-check"],
            stderr=subprocess.PIPE,
            env=environment(),
            timeout=60,
            encoding="utf-8",
            **streams,
        )
    assert (done.returncode, noise(done.stderr)) == (1, []), done.stderr
    assert re.match(r"\[4/\d+\] ", done.stderr) and "self-check failed" in done.stderr


@pytest.fixture
def child_online(provider):
    """The script as a process against `provider`: the interpreter's own exit is part of it."""

    def run(args, **streams):
        env = environment(OPENAI_API_KEY=KEY, OPENAI_MODEL="m", OPENAI_BASE_URL=provider.base_url)
        return run_script(args, env, **streams)

    return run


BAD_REQUEST = Reply(status=400, json={"error": {"message": "bad request"}})
# (what the provider sends, the broken stream, how it is broken, the run's own exit code)
ONLINE_BROKEN = [
    pytest.param(completion(content="42"), "stdout", "reader-left", 0, id="answer-stdout-left"),
    pytest.param(
        completion(content="42", finish_reason="length"),
        "stderr",
        "full",
        1,
        id="stop-stderr-full",
        marks=needs_dev_full,
    ),
    pytest.param(BAD_REQUEST, "stderr", "reader-left", 3, id="request-failed-stderr-left"),
]


@needs_posix
@pytest.mark.parametrize(("reply", "stream", "kind", "code"), ONLINE_BROKEN)
def test_an_online_run_with_a_broken_stream_keeps_its_exit_code_without_noise(
    child_online, provider, reply, stream, kind, code
):
    provider.script(reply)
    with broken(stream, kind) as streams:
        done = child_online(["--show-messages"], **streams)
    assert (done.returncode, len(provider.requests)) == (code, 1), done.stderr
    if stream == "stdout":  # the report (if any) still reaches stderr, and nothing else does
        assert noise(done.stderr) == [] and len(done.stderr.splitlines()) == (2 if code else 0)
    else:  # the history --show-messages prints still reaches stdout
        assert '"role": "user"' in done.stdout and noise(done.stdout) == [], done.stdout


@needs_posix
def test_a_reader_that_leaves_mid_output_like_head_ends_nothing_but_the_output(provider):
    # `python3 script --show-messages 问题 | head -c 100`: the history is bigger than the pipe,
    # so the script is still writing when the reader goes
    provider.script(completion(content="42"))
    question = ["请认真算。" * 5_000] * 4
    env = environment(OPENAI_API_KEY=KEY, OPENAI_MODEL="m", OPENAI_BASE_URL=provider.base_url)
    child = subprocess.Popen(
        [sys.executable, str(SCRIPT), "--show-messages", *question],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        head = child.stdout.read(100)
        child.stdout.close()  # head -c 100 exits
        err = child.stderr.read().decode()
        code = child.wait(timeout=60)
    finally:
        child.kill()
        child.wait()
    assert head.startswith(b"step 1: finish_reason=stop\nAgent> 42\n"), head
    assert (code, err) == (0, "")


@needs_posix
def test_stdout_and_stderr_in_one_log_keep_the_order_they_were_written_in(child_online, provider):
    # `python3 script 2>&1 | tee log`: the step line comes before the report that follows it,
    # though stdout into a pipe is block-buffered and stderr is not
    provider.script(completion(content="248 乘以", finish_reason="length"))
    done = child_online(["--show-messages"], stderr=subprocess.STDOUT)
    lines = done.stdout.splitlines()
    assert done.returncode == 1 and lines[0] == "step 1: finish_reason=length", lines
    assert lines[1].startswith("[Model] step 1: ") and lines[2].startswith("最后一个成功事件")
    assert json.loads("\n".join(lines[3:]))[0]["role"] == "user", lines


# ---------------------------------------------------------------------------
# In-process: a real pipe whose reader has left, as sys.stdout or sys.stderr
# ---------------------------------------------------------------------------


@pytest.fixture(params=[True, False], ids=["buffered", "unbuffered"])
def reader_left(request):
    """A text stream like sys.stdout on `| head -c1` after head exited: buffered (the
    default) or unbuffered (python -u). Writes fail with BrokenPipeError, now or at flush."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    raw = io.FileIO(write_end, "w")
    binary = io.BufferedWriter(raw) if request.param else raw
    stream = io.TextIOWrapper(binary, encoding="utf-8", write_through=not request.param)
    yield stream
    with contextlib.suppress(OSError, ValueError):
        stream.close()


def test_after_a_write_fails_writing_goes_on_and_the_exit_flush_is_quiet(reader_left):
    out = lesson.MaskedOutput(reader_left, str)
    for text in ["one\n", "two\n", "three\n"]:
        out.write(text)  # never raises
    print("four", file=out)
    reader_left.flush()  # what the interpreter does on its way out: no "Exception ignored"
    reader_left.close()


def test_a_write_to_a_stream_already_closed_does_not_raise():
    closed = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    closed.close()
    out = lesson.MaskedOutput(closed, str)
    out.write("one\n")
    print("two", file=out)


class Recorder:
    """A text stream that keeps what happens to it, in order."""

    encoding = "utf-8"

    def __init__(self):
        self.events = []

    def write(self, text):
        self.events.append(text)
        return len(text)

    def flush(self):
        self.events.append("<flush>")

    def isatty(self):
        return False

    def fileno(self):
        raise io.UnsupportedOperation("fileno")


def test_every_write_is_masked_and_flushed_at_once():
    stream = Recorder()
    out = lesson.MaskedOutput(stream, lesson.secret_mask({"OPENAI_API_KEY": KEY}))
    print(f"key={KEY}", file=out)
    assert stream.events == ["key=***", "<flush>", "\n", "<flush>"]


@pytest.fixture
def run_reader_left(reader_left, provider, capsys, monkeypatch):
    """Run main() online against `provider`, its stdout a pipe whose reader has left."""

    def runner(args):
        with monkeypatch.context() as patch:
            patch.setattr(sys, "stdout", reader_left)
            code = lesson.main(args, online(provider))
        return code, capsys.readouterr().err

    return runner


def test_a_successful_answer_whose_reader_left_keeps_exit_0(run_reader_left, provider):
    provider.script(completion(content="42"))
    code, err = run_reader_left([])
    assert (code, err) == (0, "")
    assert len(provider.requests) == 1  # the answer really came and was lost on the way out


def test_a_stopped_loop_whose_reader_left_keeps_the_loops_exit_code(run_reader_left, provider):
    provider.script(completion(content="248 乘以", finish_reason="length"))
    code, err = run_reader_left(["--show-messages"])
    assert (code, err.startswith("[Model] step 1: ")) == (1, True), err


# ---------------------------------------------------------------------------
# stderr that cannot be written: the failure's own exit code survives
# ---------------------------------------------------------------------------


@needs_posix
@BROKEN
def test_a_configuration_report_that_cannot_be_written_keeps_exit_2(kind):
    with broken("stderr", kind) as streams:
        done = run_script([], environment(), **streams)
    assert (done.returncode, done.stdout) == (2, "")


def test_a_request_failure_whose_report_cannot_be_written_keeps_exit_3(
    provider, capsys, monkeypatch, reader_left
):
    # In-process, like the stdout cases above: the processes above prove the interpreter's exit
    provider.script(BAD_REQUEST)  # one attempt
    with monkeypatch.context() as patch:
        patch.setattr(sys, "stderr", reader_left)
        code = lesson.main([], online(provider))
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
