"""Checks of the test server itself, using urllib only."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pytest

from tests.provider_server import OMIT, ProviderServer, Reply, completion, tool_call


def post(url: str, payload: object, timeout: float = 5) -> tuple[int, str, bytes]:
    """POST JSON; return status, content type and body, also for HTTP errors."""
    request = urllib.request.Request(
        url,
        data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json", "Authorization": "Bearer sk-test"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.headers["Content-Type"], response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.headers["Content-Type"], err.read()


def test_replies_are_used_in_order_and_requests_recorded(provider):
    provider.script(completion("one"), Reply(status=429, json={"error": {"message": "slow"}}))
    url = provider.base_url + "/chat/completions"

    status, ctype, raw = post(url, {"model": "m", "n": 1})
    assert (status, ctype) == (200, "application/json")
    assert json.loads(raw)["choices"][0]["message"]["content"] == "one"
    assert post(url, {"model": "m", "n": 2})[0] == 429

    recorded = provider.requests
    assert [r.body["n"] for r in recorded] == [1, 2]
    assert recorded[0].path == "/v1/chat/completions"
    assert recorded[0].headers["authorization"] == "Bearer sk-test"
    assert json.loads(recorded[0].raw) == recorded[0].body


def test_exhausted_script_answers_500(provider):
    status, _, raw = post(provider.base_url + "/chat/completions", {})
    assert status == 500
    assert "no scripted reply left" in json.loads(raw)["error"]["message"]


def test_other_paths_get_html_404_and_are_recorded(provider):
    provider.script(completion("unused"))
    url = provider.base_url.replace("/v1", "") + "/chat/completions"

    status, ctype, raw = post(url, {})
    assert (status, ctype) == (404, "text/html")
    assert b"<title>404 Not Found</title>" in raw
    assert [r.path for r in provider.requests] == ["/chat/completions"]
    assert post(provider.base_url + "/chat/completions", {})[0] == 200  # script untouched


def test_callable_reply_and_raw_body(provider):
    provider.script(
        lambda body: completion(body["messages"][-1]["content"].upper()),
        Reply(body=b"<html>oops</html>", content_type="text/html", headers={"X-Test": "1"}),
    )
    url = provider.base_url + "/chat/completions"

    _, _, raw = post(url, {"messages": [{"role": "user", "content": "hi"}]})
    assert json.loads(raw)["choices"][0]["message"]["content"] == "HI"
    assert post(url, {})[1:] == ("text/html", b"<html>oops</html>")


def test_builders_can_omit_keys():
    call = tool_call(OMIT, "f", '{"a": 1}')
    assert call == {"type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
    assert "function" not in tool_call("c1", None, None, function=OMIT)
    body = completion(OMIT, tool_calls=[call], finish_reason=OMIT, reasoning_content="r")
    choice = body["choices"][0]
    assert "finish_reason" not in choice and "content" not in choice["message"]
    assert choice["message"]["reasoning_content"] == "r"


def test_stop_interrupts_a_delayed_reply():
    server = ProviderServer().start()
    server.script(Reply(delay=30, json={}))
    with pytest.raises(OSError):
        post(server.base_url + "/chat/completions", {}, timeout=0.3)
    started = time.monotonic()
    server.stop()
    assert time.monotonic() - started < 2


def test_closed_port_url_refuses(closed_port_url):
    with pytest.raises(urllib.error.URLError):
        post(closed_port_url + "/chat/completions", {}, timeout=1)
