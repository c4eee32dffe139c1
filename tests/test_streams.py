"""Where the output goes: streams that are closed, full or abandoned by their reader; text from
the provider that must not reach a terminal raw; and the wait ticker, which only prints.

Most broken-stream tests start real processes, because what they pin happens at the process
boundary (the exit code, and what the interpreter prints while shutting down). They prefer
--self-check and configuration errors, which start in ~50 ms without importing openai; a few
online runs (`| head`, `2>&-`) go through the process too, the rest of the online exit codes,
decided inside main(), are checked in-process. The ticker is driven by fake seconds (its
Event's wait() returns at once), so nothing here waits for real time or measures it.
"""

import contextlib
import io
import json
import os
import re
import subprocess
import sys
import threading
import unicodedata
from pathlib import Path

import pytest

import lesson_03_tool_calling_loop as lesson
from tests.provider_server import (
    ARTICLE_FINAL,
    ARTICLE_LINES,
    ARTICLE_TOOL_TURN,
    Reply,
    completion,
    tool_call,
)

SCRIPT = Path(lesson.__file__).resolve()
KEY = "sk-streams-secret-0123456789"
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
def test_a_self_check_that_cannot_write_its_result_keeps_its_own_exit_code(kind, buffering):
    # Lost output is not a failure of the run: the self-check passed, so it exits 0, silently
    with broken("stdout", kind) as streams:
        done = run_script(["--self-check"], environment(**buffering), **streams)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr


@needs_posix
@BUFFERING
@BROKEN_STDOUT
def test_a_self_check_that_cannot_write_its_result_prints_no_python_noise(kind, buffering):
    with broken("stdout", kind) as streams:
        done = run_script(["--self-check"], environment(**buffering), **streams)
    assert noise(done.stderr) == [], done.stderr


@needs_posix
def test_a_failing_self_check_that_cannot_write_its_result_still_exits_1(tmp_path):
    # The exit code is the run's own, not a constant 0: a self-check that fails says so even
    # when nobody can read it (a copy of the script whose multiply() is wrong)
    broken_copy = tmp_path / SCRIPT.name
    source = SCRIPT.read_text(encoding="utf-8")
    wrong = source.replace("    return a * b\n", "    return a * b + 1\n", 1)
    assert wrong != source
    broken_copy.write_text(wrong, encoding="utf-8")
    command = ["sh", "-c", 'exec "$@" 1>&-', "sh", sys.executable, str(broken_copy)]
    done = subprocess.run(
        [*command, "--self-check"],
        stderr=subprocess.PIPE,
        env=environment(),
        timeout=60,
        encoding="utf-8",
    )
    assert (done.returncode, noise(done.stderr)) == (1, []), done.stderr


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
        completion(content="42", finish_reason="length"), "stderr", "closed", 1, id="stop-stderr"
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


class StopsAfterOneWrite:
    """A stream whose reader left after the first write: every later write fails."""

    encoding = "utf-8"

    def __init__(self):
        self.writes = []

    def write(self, text):
        self.writes.append(text)
        if len(self.writes) > 1:
            raise BrokenPipeError(32, "Broken pipe")
        return len(text)

    def flush(self):
        pass


def test_after_a_failed_write_nothing_more_is_written():
    stream = StopsAfterOneWrite()
    out = lesson.SafeOutput(stream, str)
    for text in ["one\n", "two\n", "three\n", "four\n"]:
        out.write(text)  # never raises
    out.flush()
    assert (stream.writes, out.failed) == (["one\n", "two\n"], True)


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


# ---------------------------------------------------------------------------
# The wait ticker: a status line on a terminal, erased at the end; a line every 10 s elsewhere
# ---------------------------------------------------------------------------


class Waiting:
    """The stream ticking() writes to: what SafeOutput offers it (put, erasable)."""

    def __init__(self, erasable):
        self.erasable = erasable
        self.puts = []

    def put(self, text):
        self.puts.append(text)


@pytest.fixture
def ticks(monkeypatch):
    """Drive ticking() with `n` seconds that pass at once: its Event's wait() times out n times,
    then blocks until the block ends. Returns a function running the ticker for n ticks."""

    def run(stream, n):
        ticked, done = threading.Event(), threading.Event()

        class Seconds:
            def __init__(self):
                self.left = n

            def set(self):
                done.set()

            def wait(self, _timeout):
                if self.left == 0:
                    ticked.set()
                    return done.wait(30)
                self.left -= 1
                return False  # one second "passed"

        fake = type("threading", (), {"Event": Seconds, "Thread": threading.Thread})
        monkeypatch.setattr(lesson, "threading", fake)
        with lesson.ticking(stream):
            assert ticked.wait(30), "the ticker did not tick"
        return stream.puts

    return run


def test_on_a_terminal_the_wait_is_a_status_line_rewritten_each_second_then_erased(ticks):
    puts = [text for text in ticks(Waiting(erasable=True), 3) if text]
    *status, erase = puts
    assert [text.startswith("\r") and "\n" not in text for text in status] == [True] * 3, puts
    assert [re.findall(r"\d+", text) for text in status] == [["1"], ["2"], ["3"]], puts
    assert (erase[0], erase[-1], erase.strip()) == ("\r", "\r", ""), puts  # blanked, cursor back
    assert len(erase) - 2 >= max(len(text) for text in status) - 1, puts  # covers the status


def test_on_a_terminal_a_reply_within_the_first_second_writes_nothing(ticks):
    assert "".join(ticks(Waiting(erasable=True), 0)) == ""


@pytest.mark.parametrize(("seconds", "lines"), [(0, 0), (9, 0), (10, 1), (25, 2)])
def test_off_a_terminal_the_wait_is_one_plain_line_every_10_seconds(ticks, seconds, lines):
    written = "".join(ticks(Waiting(erasable=False), seconds))
    assert "\r" not in written and written.count("\n") == lines, repr(written)
    assert re.findall(r"\d+", written) == [str(10 * (i + 1)) for i in range(lines)], written


class Terminal:
    encoding = "utf-8"

    def __init__(self, tty):
        self.tty = tty

    def isatty(self):
        return self.tty

    def write(self, text):
        return len(text)

    def flush(self):
        pass


@pytest.mark.parametrize(
    ("tty", "dumb", "erasable"), [(True, False, True), (True, True, False), (False, False, False)]
)
def test_only_a_terminal_that_understands_carriage_returns_gets_the_status_line(
    tty, dumb, erasable
):
    assert lesson.SafeOutput(Terminal(tty), str, dumb).erasable is erasable


# The ticker inside a real run: main() hands it stderr; the provider answers at once, and each
# request "waits" `seconds` fake seconds, so what is written does not depend on the machine.


@pytest.fixture
def seconds_per_request(monkeypatch):
    """set(n): from now on, every ticking() sees n seconds pass before its request ends."""

    class Seconds:
        def __init__(self, n):
            self.left, self.done = n, threading.Event()

        def set(self):
            self.done.set()

        def wait(self, _timeout):
            if self.left == 0:
                return self.done.wait(30)
            self.left -= 1
            return False  # one second "passed", whether or not the reply has come

    def set_seconds(n):
        fake = type("threading", (), {"Event": lambda: Seconds(n), "Thread": threading.Thread})
        monkeypatch.setattr(lesson, "threading", fake)

    return set_seconds


class TerminalText:
    """A text stream that says it is a terminal (the stderr of `python3 script > log`)."""

    encoding = "utf-8"

    def __init__(self, tty=True):
        self.tty, self.text = tty, []

    def isatty(self):
        return self.tty

    def write(self, text):
        self.text.append(text)
        return len(text)

    def flush(self):
        pass

    def getvalue(self):
        return "".join(self.text)


def screen(written):
    """What a terminal shows after `written`: \r goes back to column 0 and later text overwrites
    earlier text; wide characters (and ambiguous ones, wide on CJK terminals) take two columns."""
    rows = []
    for line in written.split("\n"):
        cells, column = [], 0
        for char in line:
            if char == "\r":
                column = 0
                continue
            width = 2 if unicodedata.east_asian_width(char) in "WFA" else 1
            cells += [" "] * (column + width - len(cells))
            cells[column : column + width] = [char] + [""] * (width - 1)
            column += width
        rows.append("".join(cells).rstrip())
    return "\n".join(rows).strip()


@pytest.fixture
def run_watched(provider, monkeypatch):
    """main() in-process with stderr on `terminal`; returns (code, stdout, what stderr got)."""

    def run(terminal, *replies, **variables):
        provider.script(*replies)
        answer = io.StringIO()
        with monkeypatch.context() as patch:
            patch.setattr(sys, "stdout", answer)
            patch.setattr(sys, "stderr", terminal)
            code = lesson.main([], {**online(provider), **variables})
        return code, answer.getvalue(), terminal.getvalue()

    return run


def test_on_a_terminal_the_wait_is_shown_and_leaves_nothing_on_the_screen(
    run_watched, seconds_per_request
):
    seconds_per_request(3)
    code, out, err = run_watched(TerminalText(), ARTICLE_TOOL_TURN, ARTICLE_FINAL)
    assert (code, out.splitlines()) == (0, ARTICLE_LINES)  # the status never reaches stdout
    statuses = [text for text in re.findall(r"\r([^\r\n]*)", err) if text.strip()]
    assert [re.findall(r"\d+", text)[:1] for text in statuses] == [["1"], ["2"], ["3"]] * 2, err
    assert "\n" not in err and screen(err) == "", repr(err)


def test_on_a_terminal_the_report_after_a_wait_stands_alone(run_watched, seconds_per_request):
    seconds_per_request(12)
    bad = Reply(status=400, json={"error": {"message": "bad second turn"}})
    code, _, err = run_watched(TerminalText(), ARTICLE_TOOL_TURN, bad)
    report = screen(err).splitlines()
    assert (code, len(report)) == (3, 2), repr(err)
    assert report[0].startswith("[Provider] step 2: HTTP 400：bad second turn"), report


@pytest.mark.parametrize(
    ("tty", "variables"),
    [
        pytest.param(False, {}, id="not-a-terminal"),
        pytest.param(True, {"TERM": "dumb"}, id="dumb-terminal"),
    ],
)
def test_off_a_terminal_the_wait_is_a_plain_line_every_10_seconds(
    run_watched, seconds_per_request, tty, variables
):
    seconds_per_request(12)  # each of the two requests waits 12 s: one line each
    code, out, err = run_watched(TerminalText(tty), ARTICLE_TOOL_TURN, ARTICLE_FINAL, **variables)
    lines = err.splitlines()
    assert (code, out.splitlines(), "\r" in err) == (0, ARTICLE_LINES, False), repr(err)
    assert [re.findall(r"\d+", line)[:1] for line in lines] == [["10"], ["10"]], lines


def test_a_reply_in_the_first_second_writes_nothing_about_waiting(run_watched, seconds_per_request):
    seconds_per_request(0)
    code, out, err = run_watched(TerminalText(), ARTICLE_TOOL_TURN, ARTICLE_FINAL)
    assert (code, out.splitlines(), err) == (0, ARTICLE_LINES, "")
