"""The learner's machine: proxies, certificate files, a shadowed SDK, leftover OPENAI_*
variables, secrets in the wrong variable, Ctrl-C, and what the terminal shows while waiting.

Each cause is made real: a proxy is a separate local process (or a port where nothing
listens), certificate variables point at real missing or junk files, a real openai.py sits
beside a copy of the script, and signals go to a real process group writing into a real pipe.
Where the process boundary is not the point, main() runs in-process; the SDK reads proxies
and certificate files from os.environ, so those tests set them there (monkeypatch).
"""

import fcntl
import importlib.util
import io
import os
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

import openai  # noqa: F401  (no skip: without the SDK these tests must fail, not vanish)
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
from tests.runs import environ_runner

pytestmark = pytest.mark.usefixtures("quick_sdk_retries")
SCRIPT = Path(lesson.__file__).resolve()
KEY = "sk-environment-secret-0123456789"
SELF_SIGNED = Path(__file__).resolve().parent / "tls" / "self_signed_127.0.0.1.pem"
TOOL_TURN, FINAL = ARTICLE_TOOL_TURN, ARTICLE_FINAL


def is_ambient(name):
    """Read on the request path by the SDK, httpx or ssl, besides the script's own variables."""
    ssl_files = ("SSL_CERT_FILE", "SSL_CERT_DIR", "SSLKEYLOGFILE", "OPENAI_")
    return name.lower().endswith("_proxy") or name.upper().startswith(ssl_files)


@pytest.fixture(autouse=True)
def plain_environment(monkeypatch):
    """Start every test from an environment with no proxy, certificate or OPENAI_* setting."""
    for name in [name for name in os.environ if is_ambient(name)]:
        monkeypatch.delenv(name)


@pytest.fixture
def run(provider, capsys, monkeypatch):
    """Run main() in-process; variables go into os.environ too, where the SDK reads them."""
    return environ_runner(provider, capsys, monkeypatch, KEY)


def child_environment(**variables):
    env = {name: value for name, value in os.environ.items() if not is_ambient(name)}
    env.pop("PYTHONUNBUFFERED", None)  # a learner's stdout into a pipe is block-buffered
    return {**env, "OPENAI_API_KEY": KEY, "OPENAI_MODEL": "m", **variables}


def report(result):
    """The two stderr lines, as (first, second); fails if there are not exactly two."""
    lines = result.err.splitlines()
    assert len(lines) == 2 and "Traceback" not in result.everything, result.everything
    return lines[0], lines[1]


# ---------------------------------------------------------------------------
# Proxies
# ---------------------------------------------------------------------------

PROXY_PROCESS = r"""
import socket, sys, threading
status = sys.argv[1].encode()
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen(16)
print(server.getsockname()[1], flush=True)

def answer(conn):
    with conn:
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = conn.recv(4096)
            if not chunk:
                return
            head += chunk
        body = b"proxy says: " + status
        conn.sendall(
            b"HTTP/1.1 " + status + b"\r\nProxy-Authenticate: Basic realm=\"lesson\"\r\n"
            + b"Content-Type: text/plain\r\nContent-Length: %d\r\n" % len(body)
            + b"Connection: close\r\n\r\n" + body
        )

while True:
    conn, _ = server.accept()
    threading.Thread(target=answer, args=(conn,), daemon=True).start()
"""


@pytest.fixture
def proxy_answering():
    """Start a proxy process on 127.0.0.1 that answers every request with `status`."""
    started = []

    def start(status):
        process = subprocess.Popen(
            [sys.executable, "-c", PROXY_PROCESS, status], stdout=subprocess.PIPE, text=True
        )
        started.append(process)
        return f"http://127.0.0.1:{int(process.stdout.readline())}"

    yield start
    for process in started:
        process.kill()
        process.wait()


def free_closed_port_url():
    """http://127.0.0.1:<port>/v1 where nothing listens (the port is free again at once)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}/v1"


def dead_proxy():
    return free_closed_port_url()[: -len("/v1")]


def test_a_dead_proxy_is_named_with_its_variable_not_blamed_on_the_endpoint(run, provider):
    proxy = dead_proxy()
    result = run(http_proxy=proxy, HTTPS_PROXY=dead_proxy())  # http:// goes via http_proxy
    first, second = report(result)
    assert result.code == 3 and provider.requests == []
    assert first.startswith(f"[SDK/网络] step 1: 请求没能经代理 {proxy}（http_proxy）送到端点")
    assert "unset http_proxy" in second and "NO_PROXY" in second
    assert "HTTPS_PROXY" not in result.err


@pytest.mark.parametrize("scheme", ["http", "https"])
@pytest.mark.parametrize("status", ["407 Proxy Authentication Required", "502 Bad Gateway"])
def test_a_proxys_own_407_or_502_is_blamed_on_the_proxy(
    run, provider, proxy_answering, scheme, status
):
    proxy = proxy_answering(status)
    variable = f"{scheme.upper()}_PROXY"
    endpoint = f"{scheme}://127.0.0.1:{provider.port}/v1"
    result = run(OPENAI_BASE_URL=endpoint, **{variable: proxy})
    first, second = report(result)
    assert result.code == 3 and provider.requests == []
    assert first.startswith(f"[SDK/网络] step 1: 请求没能经代理 {proxy}（{variable}）送到端点")
    assert status.split()[0] in first and variable in second and "[Provider]" not in first


@pytest.mark.parametrize(
    "proxy", [dead_proxy(), "socks5://127.0.0.1:9"], ids=["dead-http-proxy", "socks-no-extra"]
)
def test_a_local_endpoint_works_behind_a_proxy_when_no_proxy_covers_it(run, provider, proxy):
    provider.script(TOOL_TURN, FINAL)
    result = run(ALL_PROXY=proxy, HTTP_PROXY=proxy, NO_PROXY=f"localhost,127.0.0.1:{provider.port}")
    assert (result.code, result.out.splitlines(), result.err) == (0, ARTICLE_LINES, "")


@pytest.mark.skipif(importlib.util.find_spec("socksio") is not None, reason="socksio installed")
def test_a_socks_proxy_without_the_extra_names_the_variable_and_the_extra(run, provider):
    result = run(all_proxy="socks5://127.0.0.1:7890")
    first, second = report(result)
    assert result.code == 2 and provider.requests == []
    assert first.startswith("[Harness] ") and "socksio" in first  # the library's own words
    assert "all_proxy" in second and "pip install socksio" in second


def test_a_proxy_password_is_not_printed(run, provider):
    result = run(HTTP_PROXY=dead_proxy().replace("//", "//learner:hunter2pass@"))
    assert result.code == 3 and "hunter2pass" not in result.everything
    assert "//***@127.0.0.1" in result.err


# ---------------------------------------------------------------------------
# Certificates and TLS
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("variable", "what"),
    [
        ("SSL_CERT_FILE", "missing"),
        ("SSL_CERT_FILE", "junk"),
        ("SSLKEYLOGFILE", "missing"),
    ],
)
def test_a_bad_certificate_variable_is_named_even_for_a_plain_http_endpoint(
    run, provider, tmp_path, variable, what
):
    path = tmp_path / "no-such-dir" / "file.pem"
    if what == "junk":
        path = tmp_path / "stale-conda-ca.pem"
        path.write_text("not a certificate\n")
    # A valid SSL_CERT_FILE beside (only with it does httpx2 build its context through
    # ssl.create_default_context, which reads SSLKEYLOGFILE; httpx always does). One report for
    # a client the SDK cannot build: its hint names every such variable that is set, and only
    # those; nothing was sent, so the endpoint is not blamed.
    valid = {"SSL_CERT_FILE": str(SELF_SIGNED)} if variable != "SSL_CERT_FILE" else {}
    result = run(**valid, **{variable: str(path)})
    first, second = report(result)
    assert result.code == 2 and provider.requests == []
    assert first.startswith("[Harness] ") and "OPENAI_BASE_URL" not in result.err
    named = {name for name in ("SSL_CERT_FILE", "SSL_CERT_DIR", "SSLKEYLOGFILE") if name in second}
    assert named == {"SSL_CERT_FILE", variable}, second


@pytest.fixture
def tls_provider(provider):
    """The scripted provider, speaking TLS with a self-signed certificate for 127.0.0.1."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(SELF_SIGNED)
    provider._httpd.socket = context.wrap_socket(provider._httpd.socket, server_side=True)
    return provider


def test_a_certificate_directory_without_the_ca_is_a_certificate_failure(
    run, tls_provider, tmp_path
):
    result = run(
        OPENAI_BASE_URL=f"https://127.0.0.1:{tls_provider.port}/v1", SSL_CERT_DIR=str(tmp_path)
    )
    first, second = report(result)
    assert result.code == 3
    assert first.startswith("[SDK/网络] step 1: TLS 证书校验失败（APIConnectionError")
    assert "SSL_CERT_DIR" in second


def test_https_typed_for_a_plain_http_server_says_use_http(run, provider):
    result = run(OPENAI_BASE_URL=f"https://127.0.0.1:{provider.port}/v1")
    first, second = report(result)
    assert result.code == 3
    assert first.startswith("[SDK/网络] step 1: TLS 握手失败：这个端口说的多半是 http")
    assert "http://" in second and "OPENAI_TIMEOUT" not in second


def test_connecting_fails_fast_whatever_openai_timeout_is(run, monkeypatch):
    # A listener that accepts and never answers: a plain-http server waiting for a request
    # line while the client waits for the TLS handshake. OPENAI_TIMEOUT is 20 s.
    monkeypatch.setattr(lesson, "CONNECT_SECONDS", 0.25)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"https://127.0.0.1:{silent.getsockname()[1]}/v1"
        started = time.monotonic()
        result = run(OPENAI_BASE_URL=url, OPENAI_TIMEOUT="20")
    assert time.monotonic() - started < 10, "waited for OPENAI_TIMEOUT, not the connect timeout"
    first, second = report(result)
    assert result.code == 3 and first.startswith("[SDK/网络] step 1: "), result.err
    assert "ConnectTimeout" in first or "APITimeoutError" in first
    assert "http://" in second  # a plain-http port behind https:// never answers the handshake


def test_a_redirect_loop_is_called_a_redirect_loop(run, provider):
    loop = Reply(status=307, headers={"Location": "/v1/chat/completions"})
    provider.script(*[loop] * 60)  # httpx gives up after 20; the SDK retries once
    first, second = report(run())
    assert first.startswith("[SDK/网络] step 1: 重定向循环（APIConnectionError")
    assert "curl -I" in second


# ---------------------------------------------------------------------------
# The SDK itself: shadowed by a learner's file, or not installed in this interpreter
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("shadow", ["openai.py", "openai/__init__.py"])
def test_a_learners_own_openai_next_to_the_script_is_named(tmp_path, shadow):
    shutil.copy(SCRIPT, tmp_path / SCRIPT.name)
    path = tmp_path / shadow
    path.parent.mkdir(exist_ok=True)
    path.write_text("print('my first experiment with the API')\n")
    done = subprocess.run(
        [sys.executable, str(tmp_path / SCRIPT.name)],
        env=child_environment(OPENAI_BASE_URL=free_closed_port_url()),
        cwd=SCRIPT.parent,
        capture_output=True,
        text=True,
        timeout=60,
    )
    first, second = done.stderr.splitlines()
    assert done.returncode == 2
    assert first.startswith("[Harness] ") and str(path) in first  # the file to rename
    assert second.startswith("建议：") and "openai.py" in second


def test_without_the_sdk_the_hint_is_to_activate_the_readme_venv(run, monkeypatch):
    monkeypatch.setitem(sys.modules, "openai", None)  # `import openai` now raises ImportError
    first, second = report(run())
    assert first == "[Harness] 没有安装 openai SDK"
    assert ". .venv/bin/activate" in second and "第 2 步" in second


# ---------------------------------------------------------------------------
# OPENAI_* variables the SDK would read on its own
# ---------------------------------------------------------------------------


def test_leftover_openai_variables_do_not_travel_to_a_third_party_or_replace_the_key(run, provider):
    # The SDK itself reads OPENAI_ORG_ID and OPENAI_PROJECT_ID from os.environ (the runner puts
    # them there): only the script's refusal keeps them off the wire.
    provider.script(FINAL)
    result = run(
        OPENAI_ORG_ID="org-leftover\r",
        OPENAI_PROJECT_ID="proj_leftover",
        OPENAI_ADMIN_KEY="sk-admin-leftover",
    )
    assert result.code == 0, result.everything
    sent = provider.requests[0].headers
    assert sent["authorization"] == f"Bearer {KEY}"
    assert not {"openai-organization", "openai-project"} & set(sent)
    leftovers = ("org-leftover", "proj_leftover", "sk-admin-leftover")
    assert [value for value in sent.values() if any(word in value for word in leftovers)] == []


def test_openai_custom_headers_is_a_configuration_error_naming_it(run, provider):
    # The SDK would send every header in it, someone else's key too, to this endpoint.
    provider.script(FINAL)
    result = run(OPENAI_CUSTOM_HEADERS="Authorization: Bearer sk-someone-elses-key\nX-Team: 值")
    first, second = report(result)
    assert (result.code, provider.requests) == (2, []), result.everything
    assert first.startswith("[Harness] ") and "OPENAI_CUSTOM_HEADERS" in first + second
    assert "sk-someone" not in result.everything


def test_building_the_client_leaves_the_environment_as_it_was(monkeypatch):
    monkeypatch.setenv("OPENAI_ORG_ID", "org-leftover")
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    before = dict(os.environ)
    environ = {**os.environ, "OPENAI_API_KEY": KEY, "OPENAI_MODEL": "m"}
    environ["OPENAI_BASE_URL"] = "http://127.0.0.1:9/v1"
    config = lesson.check_config(lesson.read_environment(environ))
    lesson.make_client(config, lambda text: None)
    assert dict(os.environ) == before


# ---------------------------------------------------------------------------
# Secrets
# ---------------------------------------------------------------------------


def test_a_key_in_the_model_variable_is_refused_without_printing_it(run, provider):
    swapped = "sk-proj-Zq8dL2mN4pR6tV8xA1cE3gI5kM7oQ9sU"
    result = run(OPENAI_API_KEY="gpt-4o-mini", OPENAI_MODEL=swapped)
    first, second = report(result)
    assert result.code == 2 and provider.requests == []
    assert first.startswith("[Harness] OPENAI_MODEL 不可用") and "API Key" in first
    assert "填反" in second and swapped[:12] not in result.everything


@pytest.mark.parametrize(
    "model",
    [
        "gpt-4o-mini",
        "qwen2.5:7b",
        "deepseek-chat",
        "meta-llama/Llama-3.1-8B-Instruct",
        "Qwen2.5-Coder-1.5B-Instruct-Q4_K_M.gguf",
        "ft:gpt-4o-mini-2024-07-18:org:custom:9aBcD3",
        "gemini-2.5-flash",
        "any",
    ],
)
def test_real_model_names_are_not_taken_for_keys(model):
    assert lesson.check_config({"OPENAI_API_KEY": KEY, "OPENAI_MODEL": model})["model"] == model


def test_a_key_straddling_the_cut_of_an_error_page_is_masked_before_the_cut(run, provider):
    page = "<p>" + "x" * 3953 + "<title>Invalid API key: " + KEY + "</title>"
    assert page.index(KEY) < 4000 < page.index(KEY) + len(KEY)  # the key crosses the cut
    provider.script(Reply(status=401, body=page.encode(), content_type="text/html"))
    result = run()
    assert result.code == 3 and "Invalid API key: ***" in result.err
    assert KEY[:10] not in result.everything


# ---------------------------------------------------------------------------
# OpenRouter: the provider's real words inside its envelopes (issue 12, item 7)
# ---------------------------------------------------------------------------

UPSTREAM = (
    "Function call is missing a thought_signature in functionCall parts. key=" + KEY + "\x1b[2J"
)


def test_openrouters_4xx_shows_the_upstream_reason_from_metadata_raw(run, provider):
    raw = (
        '{\n  "error": {\n    "code": 400,\n    "message": "'
        + UPSTREAM.replace("\x1b", "\\u001b")
        + '"\n  }\n}\n'
    )
    body = {
        "error": {
            "message": "Provider returned error",
            "code": 400,
            "metadata": {"raw": raw, "provider_name": "Google AI Studio"},
        }
    }
    provider.script(Reply(status=400, json=body))
    first, _ = report(run())
    assert first.startswith(
        "[Provider] step 1: HTTP 400：Provider returned error：Function call is missing a "
        "thought_signature in functionCall parts. key=***\\u001b[2J"
    )
    assert KEY not in first and "\x1b" not in first


def test_openrouters_200_with_an_error_inside_the_choice_shows_its_words(run, provider):
    reply = completion(content="", finish_reason="error")
    reply["choices"][0]["error"] = {"code": 502, "message": UPSTREAM}
    provider.script(reply)
    result = run()
    first, _ = report(result)
    assert result.code == 1
    assert first.startswith(
        "[Provider] step 1: Provider 在 choices[0].error 里报错：Function call is missing"
    )
    assert "key=***\\u001b[2J" in first and KEY not in result.everything


def test_a_choice_error_beside_tool_calls_runs_nothing(run, provider):
    reply = completion(
        tool_calls=[tool_call("call_1", "multiply", '{"a":2,"b":3}')], finish_reason="error"
    )
    reply["choices"][0]["error"] = {"code": 500, "message": "upstream crashed"}
    provider.script(reply)
    result = run("--show-messages")
    assert result.code == 1 and "upstream crashed" in result.err
    assert "multiply call_id" not in result.out and len(provider.requests) == 1


# ---------------------------------------------------------------------------
# The command line: typos, Ctrl-C, waiting, and the order of the lines
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("typo", "meant"),
    [("--show-message", "--show-messages"), ("--selfcheck", "--self-check"), ("--hlep", "--help")],
)
def test_a_typod_option_suggests_the_closest_one(capsys, typo, meant):
    assert lesson.main([typo], {}) == 2
    first = capsys.readouterr().err.splitlines()[0]
    assert first.endswith(f"，是不是 {meant}？"), first


def queued(fd):
    return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]


def pipe_is_stalled(fd):
    """True once the pipe holds most of its capacity and nobody takes from it: the writer is
    blocked in write(), like a program piped into a pager that is not scrolling."""
    before = queued(fd)
    time.sleep(0.2)
    return before == queued(fd) >= fcntl.fcntl(fd, 1032) // 2  # 1032: F_GETPIPE_SZ


def wait_until(condition, seconds=30):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def interrupted_run(provider, args, *, interrupts):
    """Run the script in its own process group with stdout into a pipe nobody reads (a pager
    that is not scrolling). `interrupts` is a list of conditions; after each is met, SIGINT
    goes to the whole group, as Ctrl-C in a terminal does. Returns (exit code, stdout, stderr)."""
    child = subprocess.Popen(
        [sys.executable, str(SCRIPT), *args],
        env=child_environment(OPENAI_BASE_URL=provider.base_url),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        for condition in interrupts:
            wait_until(lambda c=condition: c(child))
            os.killpg(child.pid, signal.SIGINT)
        wait_until(lambda: child.poll() is not None)  # without waiting for its reader
        out = child.stdout.read().decode(errors="replace")
        return child.returncode, out, child.stderr.read().decode()
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()


@pytest.mark.skipif(sys.platform != "linux", reason="pipe capacity via fcntl is Linux-only")
def test_ctrl_c_while_the_answer_is_written_into_a_stalled_pager(provider):
    provider.script(completion(content="三千七百二十。" * 40_000))  # far more than a pipe holds
    code, out, err = interrupted_run(
        provider, [], interrupts=[lambda child: pipe_is_stalled(child.stdout.fileno())]
    )
    assert (code, err) == (130, "已中断（Ctrl-C）\n")
    assert out.startswith("step 1: finish_reason=stop\nAgent> 三千七百二十。")


@pytest.mark.skipif(sys.platform != "linux", reason="pipe capacity via fcntl is Linux-only")
def test_a_second_ctrl_c_while_the_history_prints_is_still_one_line(provider):
    provider.script(Reply(json=FINAL, delay=30))  # the first Ctrl-C lands during the request
    question = ["请认真算。" * 5_000] * 6  # a history bigger than the pipe (each argument < 128 KB)
    code, out, err = interrupted_run(
        provider,
        ["--show-messages", *question],
        interrupts=[
            lambda child: provider.requests,
            lambda child: pipe_is_stalled(child.stdout.fileno()),
        ],
    )
    assert (code, err) == (130, "已中断（Ctrl-C）\n")
    assert out.startswith('[\n  {\n    "role": "user"')  # it was printing the history


def render(terminal_bytes):
    """What stays visible on the screen after carriage returns let later text overwrite it."""
    rows = []
    for line in terminal_bytes.decode().replace("\r\n", "\n").split("\n"):
        cells, column = [], 0
        for char in line:
            if char == "\r":
                column = 0
                continue
            cells[column : column + 1] = [char]
            column += 1
        rows.append("".join(cells).rstrip())
    return "\n".join(rows).strip()


def test_while_waiting_a_terminal_shows_progress_and_keeps_no_trace(provider, monkeypatch):
    # In-process: stderr is a real terminal (a pty), stdout is not, as in `python3 script > log`
    provider.script(Reply(json=TOOL_TURN, delay=1.6), FINAL)
    leader, follower = os.openpty()
    shown = bytearray()
    reader = threading.Thread(target=lambda: read_all(leader, shown), daemon=True)
    reader.start()
    answer = io.StringIO()
    try:
        with open(follower, "w", encoding="utf-8") as terminal, monkeypatch.context() as patch:
            patch.setattr(sys, "stdout", answer)
            patch.setattr(sys, "stderr", terminal)
            code = lesson.main([], child_environment(OPENAI_BASE_URL=provider.base_url))
    finally:
        reader.join(10)
        os.close(leader)
    assert (code, answer.getvalue().splitlines()) == (0, ARTICLE_LINES)  # byte for byte
    assert "等待响应" in bytes(shown).decode(), bytes(shown)
    assert render(bytes(shown)) == ""


def read_all(fd, into):
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # the terminal's other side closed
            return
        if not chunk:
            return
        into.extend(chunk)


def test_in_one_pipe_the_report_comes_after_the_steps_and_nothing_else_is_added(provider):
    # The first reply is slow: a terminal would show the wait; a pipe must get none of it.
    bad = Reply(status=400, json={"error": {"message": "bad second turn"}})
    provider.script(Reply(json=TOOL_TURN, delay=1.6), bad)
    done = subprocess.run(  # like `python3 lesson_03_tool_calling_loop.py 2>&1 | tee log`
        [sys.executable, str(SCRIPT)],
        env=child_environment(OPENAI_BASE_URL=provider.base_url),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=60,
    )
    lines = done.stdout.splitlines()
    assert done.returncode == 3 and len(lines) == 4, done.stdout
    assert lines[:2] == ARTICLE_LINES[:2]
    assert lines[2].startswith("[Provider] step 2: HTTP 400：bad second turn")
    assert lines[3].startswith("最后一个成功事件：call_1 的 Tool Result 已写入历史")


def test_a_proxy_the_run_did_not_read_from_a_variable_is_not_told_to_unset(
    provider, capsys, monkeypatch
):
    # The HTTP library decides from the process environment (or the system settings); when no
    # variable the run read holds that proxy, the report names the system settings, and there is
    # no variable to unset
    monkeypatch.setenv("HTTP_PROXY", dead_proxy())
    environ = {"OPENAI_API_KEY": KEY, "OPENAI_MODEL": "m", "OPENAI_BASE_URL": provider.base_url}
    code = lesson.main([], environ)
    first, second = capsys.readouterr().err.splitlines()
    assert code == 3 and "系统代理设置" in first, first
    assert "unset" not in second and "NO_PROXY" in second, second
