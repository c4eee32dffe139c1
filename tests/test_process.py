"""What only a real process shows: Ctrl-C while a request waits.

These run the script as a child process against the loopback test server, because the
promises are about the process: its exit status, and what the interpreter prints on the way
out (no traceback, no KeyboardInterrupt, while the SDK is blocked reading the socket).
"""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import lesson_03_tool_calling_loop as lesson
from tests.provider_server import Reply, completion

SCRIPT = Path(lesson.__file__).resolve()
KEY = "sk-process-secret-0123456789"
PYTHON_NOISE = ("Traceback", "KeyboardInterrupt", "Exception ignored")

needs_posix_signals = pytest.mark.skipif(os.name != "posix", reason="sends SIGINT to a child")


def environment(base_url, **extra):
    env = {name: value for name, value in os.environ.items() if not name.startswith("OPENAI_")}
    env.update(OPENAI_API_KEY=KEY, OPENAI_MODEL="test-model", OPENAI_BASE_URL=base_url, **extra)
    return env


@contextlib.contextmanager
def sigint_reaches_children():
    """A child inherits an *ignored* SIGINT (a CI step started with `cmd &`, nohup); a
    handled one is reset to the default on exec, so the child's Python installs its own."""
    previous = signal.getsignal(signal.SIGINT)
    if previous == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        if previous == signal.SIG_IGN:
            signal.signal(signal.SIGINT, previous)


def wait_for_requests(server, count, seconds=30):
    """Block until the server has seen `count` requests: the child is mid-request then."""
    deadline = time.monotonic() + seconds
    while len(server.requests) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"the child sent {len(server.requests)} of {count} requests")
        time.sleep(0.02)


# ---------------------------------------------------------------------------
# Ctrl-C: exit 130, one line, no traceback; --show-messages still prints the history
# ---------------------------------------------------------------------------


@needs_posix_signals
@pytest.mark.parametrize("show_messages", [False, True], ids=["plain", "show-messages"])
def test_ctrl_c_during_a_request_exits_130_with_one_line(provider, show_messages):
    provider.script(Reply(delay=30, json=completion(content="too late")))
    args = ["--show-messages"] if show_messages else []
    with sigint_reaches_children():
        child = subprocess.Popen(
            [sys.executable, str(SCRIPT), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=environment(provider.base_url),
            encoding="utf-8",
        )
    try:
        wait_for_requests(provider, 1)  # the request is hanging: the user presses Ctrl-C
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=20)
    finally:
        child.kill()
        child.wait()
    lines = err.splitlines()
    assert (child.returncode, len(lines), "已中断" in err) == (130, 1, True), err
    assert [marker for marker in PYTHON_NOISE if marker in out + err] == [], err
    if show_messages:
        history = [{"role": "user", "content": "帮我算一下 248 乘以 15"}]
        assert json.loads(out) == history, out
    else:
        assert out == ""
