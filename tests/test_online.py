"""The online path: the real openai SDK over real HTTP to a scripted server on 127.0.0.1.

Every scenario runs main() in-process (real SDK, real sockets, the script's own client and
output settings). A few also run as a subprocess, where the process itself is the point: the
article's output from a real command line, and that the two ways agree.
"""

import contextlib
import gzip
import io
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from unittest import mock
from urllib.parse import urlsplit

import openai  # (no skip: without the SDK these tests must fail, not vanish)
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import lesson_03_tool_calling_loop as lesson
from tests.provider_server import (
    OMIT,
    ProviderServer,
    Reply,
    bad_chunked,
    bad_gzip,
    broken_off,
    completion,
    recording,
    tool_call,
)
from tests.runs import Run, run_in_process

pytestmark = pytest.mark.usefixtures("quick_sdk_retries")
SCRIPT = Path(lesson.__file__).resolve()
KEY = "sk-online-test-9f8e7d6c5b4a3210"
ARGS_248_15 = '{"a":248,"b":15}'
RESULT_3720 = '{"status":"completed","result":3720}'
ARTICLE_LINES = [
    "step 1: finish_reason=tool_calls",
    f"step 1: multiply call_id=call_1 result={RESULT_3720}",
    "step 2: finish_reason=stop",
    "Agent> 248 乘以 15 等于 3720。",
]


def environment(provider, **extra):
    env = {
        "OPENAI_API_KEY": KEY,
        "OPENAI_MODEL": "test-model",
        "OPENAI_BASE_URL": provider.base_url,
    }
    env.update(extra)
    return env


def run_subprocess(env, *args):
    full = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    full.update(env)
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=full, timeout=60
    )
    return Run(done.returncode, done.stdout, done.stderr)


def make_runner(provider, capsys, mode):
    def runner(*args, **extra_env):
        env = environment(provider, **extra_env)
        if mode == "cli":
            return run_subprocess(env, *args)
        return run_in_process(capsys, env, *args)

    return runner


@pytest.fixture(params=["in-process", "cli"])
def run_both(request, provider, capsys):
    """Run the script against `provider` through main() in-process, and as a subprocess."""
    return make_runner(provider, capsys, request.param)


@pytest.fixture
def run(provider, capsys):
    """Run main() in-process: the real SDK and real HTTP, without a process start per case."""
    return make_runner(provider, capsys, "in-process")


def assert_clean_failure(result, code, first_line_start):
    assert result.code == code, result.everything
    lines = result.err.splitlines()
    assert len(lines) == 2, result.err
    assert lines[0].startswith(first_line_start), lines[0]
    assert lines[1].startswith("最后一个成功事件：") and "建议：" in lines[1]
    assert "Traceback" not in result.everything
    assert KEY not in result.everything


def built_sdk_client(config):
    """The openai.OpenAI instance make_client builds (it keeps it inside its create())."""
    made = []

    class Recording(openai.OpenAI):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    with mock.patch.object(openai, "OpenAI", Recording):
        lesson.make_client(config)
    assert len(made) == 1
    return made[0]


def tool_turn(*calls, **message_extra):
    return completion(tool_calls=list(calls), finish_reason="tool_calls", **message_extra)


FINAL = completion(content="248 乘以 15 等于 3720。")
CALL_1 = tool_call("call_1", "multiply", ARGS_248_15)


# --- happy path -----------------------------------------------------------------------------


def test_happy_path_is_two_requests_and_the_articles_output(run_both, provider):
    provider.script(tool_turn(CALL_1), FINAL)
    result = run_both()
    assert (result.code, result.err) == (0, "")
    assert result.out.splitlines() == ARTICLE_LINES

    first, second = (r.body for r in provider.requests)
    assert len(provider.requests) == 2
    assert all(r.path == "/v1/chat/completions" for r in provider.requests)
    assert provider.requests[0].headers["authorization"] == f"Bearer {KEY}"
    assert set(first) == {"model", "messages", "tools"}
    assert first["model"] == "test-model" and first["tools"] == lesson.TOOLS
    assert first["messages"] == [{"role": "user", "content": "帮我算一下 248 乘以 15"}]
    assert set(second) == {"model", "messages", "tools"}
    assert second["messages"][1:] == [
        {"role": "assistant", "content": "", "tool_calls": [CALL_1]},
        {"role": "tool", "tool_call_id": "call_1", "content": RESULT_3720},
    ]


def test_the_question_argument_is_the_user_message(run, provider):
    provider.script(completion(content="42"))
    result = run("帮我算一下 6 乘以 7")
    assert result.out.splitlines() == ["step 1: finish_reason=stop", "Agent> 42"]
    assert provider.requests[0].body["messages"] == [
        {"role": "user", "content": "帮我算一下 6 乘以 7"}
    ]


def test_show_messages_prints_the_four_message_turn(run, provider):
    provider.script(tool_turn(CALL_1, reasoning_content="内部推理：先乘"), FINAL)
    result = run("--show-messages")
    assert result.code == 0
    history = json.loads(result.out.split("Agent> 248 乘以 15 等于 3720。\n", 1)[1])
    assert [m["role"] for m in history] == ["user", "assistant", "tool", "assistant"]
    assert history[2] == {"role": "tool", "tool_call_id": "call_1", "content": RESULT_3720}
    assert "内部推理" not in result.everything


def test_show_messages_after_a_failure_shows_what_was_kept(run, provider):
    provider.script(tool_turn(CALL_1), completion(content="248 乘以", finish_reason="length"))
    result = run("--show-messages")
    assert result.code == 1
    history = json.loads(result.out[result.out.index("[") :])
    assert [m["role"] for m in history] == ["user", "assistant", "tool"]  # not the stopped reply


def test_show_messages_after_a_request_failure_shows_what_was_kept(run, provider):
    provider.script(tool_turn(CALL_1), Reply(status=400, json={"error": {"message": "bad"}}))
    result = run("--show-messages")
    assert result.code == 3, result.everything
    assert result.err.startswith("[Provider] step 2: HTTP 400：bad")
    history = json.loads(result.out[result.out.index("[") :])
    assert [m["role"] for m in history] == ["user", "assistant", "tool"]
    assert history[2] == {"role": "tool", "tool_call_id": "call_1", "content": RESULT_3720}


def test_parallel_calls_are_answered_in_order_each_paired(run, provider):
    calls = [CALL_1, tool_call("call_2", "multiply", '{"a":6,"b":7}')]
    provider.script(tool_turn(*calls), completion(content="3720 和 42"))
    result = run()
    assert result.code == 0
    sent = provider.requests[1].body["messages"]
    assert sent[1]["tool_calls"] == calls
    assert sent[2:] == [
        {"role": "tool", "tool_call_id": "call_1", "content": RESULT_3720},
        {"role": "tool", "tool_call_id": "call_2", "content": '{"status":"completed","result":42}'},
    ]
    assert "step 1: multiply call_id=call_2 result=" in result.out


@pytest.mark.parametrize(
    "call_id",
    ["functions.multiply:0", "aB3dE5fG7", "chatcmpl-tool-8c1f0e2d", "0", "call__0_multiply_x"],
)
def test_provider_id_formats_are_echoed_unchanged(run, provider, call_id):
    provider.script(tool_turn(tool_call(call_id, "multiply", ARGS_248_15)), FINAL)
    assert run().code == 0
    sent = provider.requests[1].body["messages"]
    assert sent[1]["tool_calls"][0]["id"] == call_id and sent[2]["tool_call_id"] == call_id


@pytest.mark.parametrize(
    ("content", "echoed"), [(None, ""), ("", ""), ("我来算一下。", "我来算一下。")]
)
def test_content_beside_tool_calls_is_echoed_as_a_string(run, provider, content, echoed):
    provider.script(tool_turn(CALL_1, content=content), FINAL)
    assert run().code == 0
    assert provider.requests[1].body["messages"][1]["content"] == echoed


def test_reasoning_content_goes_back_unchanged_and_private_fields_do_not(run, provider):
    thinking = "用户要 248×15，调用 multiply。"
    reply = tool_turn(CALL_1, reasoning_content=thinking, reasoning="私有 reasoning", refusal=None)
    provider.script(reply, FINAL)
    result = run()
    assert result.code == 0
    echoed = provider.requests[1].body["messages"][1]
    assert echoed == {
        "role": "assistant",
        "content": "",
        "tool_calls": [CALL_1],
        "reasoning_content": thinking,
    }
    assert "248×15" not in result.everything and "私有" not in result.everything


def test_show_messages_marks_reasoning_and_signatures_without_printing_them(run, provider):
    call = {**CALL_1, "extra_content": {"google": {"thought_signature": "U0lHTkFUVVJF"}}}
    details = [{"type": "reasoning.encrypted", "data": "RU5DUllQVEVE"}]
    first = tool_turn(call, content="先乘一下。", reasoning_details=details)
    provider.script(first, completion(content="<think>再核对一遍</think>\n\n3720"))
    result = run("--show-messages")
    assert result.code == 0 and "Agent> 3720\n" in result.out  # the answer without its reasoning
    for secret in ("U0lHTkFUVVJF", "RU5DUllQVEVE"):
        assert secret not in result.everything
    history = json.loads(result.out[result.out.index("[") :])
    assert history[1]["reasoning_details"] == history[1]["tool_calls"][0]["extra_content"]
    assert history[1]["reasoning_details"] == "（已省略）"
    echoed = provider.requests[1].body["messages"][1]
    assert echoed["tool_calls"][0] == call and echoed["reasoning_details"] == details


def test_an_empty_reasoning_content_goes_back_as_it_came(run, provider):
    provider.script(tool_turn(CALL_1, reasoning_content=""), FINAL)
    assert run().code == 0
    assert provider.requests[1].body["messages"][1]["reasoning_content"] == ""


def test_extra_provider_fields_are_tolerated(run, provider):
    reply = tool_turn(CALL_1)
    reply.update(timings={"predicted_ms": 12.5}, system_fingerprint=None)
    reply["choices"][0]["native_finish_reason"] = "tool_calls"
    provider.script(reply, FINAL)
    assert run().out.splitlines() == ARTICLE_LINES


# --- bad tool arguments: controlled tool results, the loop goes on ---------------------------

BAD_ARGUMENTS = {
    "bool": ('{"a":true,"b":15}', "收到的是 True"),  # the value itself, as Python shows it
    "string number": ('{"a":"248","b":15}', "收到的是 '248'"),
    "float": ('{"a":248.0,"b":15}', "收到的是 248.0"),
    "null": ('{"a":null,"b":15}', "收到的是 None"),
    "extra key": ('{"a":248,"b":15,"c":1}', "只接受 a 和 b"),
    "duplicate key": ('{"a":1,"a":248,"b":15}', "重复"),
    "empty": ("", "为空"),
    "deep nesting": ('{"a":' + "[" * 90 + "]" * 90 + ',"b":15}', "a 必须是整数"),
    "huge nesting": ("[" * 50_000, "超过"),
    "thousands of digits": ('{"a":' + "7" * 3000 + ',"b":15}', "超过"),
    "out of range": ('{"a":1000001,"b":15}', "绝对值"),
    "not json": ("a=248, b=15", "不是合法 JSON"),
}


@pytest.mark.parametrize(
    ("arguments", "message_part"), BAD_ARGUMENTS.values(), ids=BAD_ARGUMENTS.keys()
)
def test_bad_arguments_become_a_tool_result_and_the_loop_continues(
    run, provider, arguments, message_part
):
    provider.script(
        tool_turn(tool_call("call_1", "multiply", arguments)),
        tool_turn(tool_call("call_2", "multiply", ARGS_248_15)),
        FINAL,
    )
    result = run()
    assert result.code == 0, result.everything
    assert len(provider.requests) == 3
    returned = json.loads(provider.requests[1].body["messages"][2]["content"])
    assert returned["status"] == "error" and message_part in returned["message"]
    assert (
        provider.requests[1].body["messages"][1]["tool_calls"][0]["function"]["arguments"]
        == arguments
    )
    assert result.out.splitlines()[-1] == "Agent> 248 乘以 15 等于 3720。"


def test_an_unknown_tool_becomes_a_tool_result(run, provider):
    provider.script(
        tool_turn(tool_call("call_1", "run_shell", '{"cmd":"rm -rf /"}')),
        completion(content="不能执行"),
    )
    result = run()
    assert result.code == 0
    returned = json.loads(provider.requests[1].body["messages"][2]["content"])
    assert returned["status"] == "error" and "'run_shell'" in returned["message"]  # quoted


# --- untrustworthy protocol state: stop the loop, execute nothing ----------------------------


STOPS = {
    "tool calls with a null finish_reason": (
        completion(tool_calls=[CALL_1], finish_reason=None),
        "[Provider]",
        "finish_reason=null",
    ),
    "tool calls with length": (
        completion(
            tool_calls=[tool_call("call_1", "multiply", '{"a":248,"b')], finish_reason="length"
        ),
        "[Model]",
        "截断",
    ),
    "tool_calls with an empty list": (
        completion(tool_calls=[], finish_reason="tool_calls"),
        "[Provider]",
        "没有任何 Tool Call",
    ),
    "tool_calls without a list": (
        completion(finish_reason="tool_calls"),
        "[Provider]",
        "没有任何 Tool Call",
    ),
    "empty id": (tool_turn(tool_call("", "multiply", ARGS_248_15)), "[Provider]", "缺少 id"),
    "missing id": (tool_turn(tool_call(OMIT, "multiply", ARGS_248_15)), "[Provider]", "缺少 id"),
    "duplicate ids": (
        tool_turn(CALL_1, tool_call("call_1", "multiply", '{"a":6,"b":7}')),
        "[Provider]",
        "重复",
    ),
    "length without tool calls": (
        completion(content="248 乘以 15 等", finish_reason="length"),
        "[Model]",
        '"length"',
    ),
    "content_filter": (
        completion(content="", finish_reason="content_filter"),
        "[Provider]",
        "过滤",
    ),
}
STOPS.update(
    {
        f"finish_reason {reason!r}": (
            completion(content="3720", finish_reason=reason),
            "[Provider]",
            json.dumps(reason),
        )
        for reason in ["error", "sensitive", "network_error", "eos", "model_length", "", None]
    }
)


@pytest.mark.parametrize(("reply", "link", "reason_part"), STOPS.values(), ids=STOPS.keys())
def test_untrustworthy_responses_stop_the_loop_and_run_nothing(
    run, provider, reply, link, reason_part
):
    provider.script(reply, FINAL)
    result = run()
    assert_clean_failure(result, 1, f"{link} step 1: ")
    assert reason_part in result.err.splitlines()[0]
    assert "最后一个成功事件：step 1: 收到响应" in result.err
    assert len(provider.requests) == 1
    assert "call_id=" not in result.out and "Agent>" not in result.out


def test_the_step_limit_sends_exactly_eight_requests(run, provider):
    provider.script(
        *[tool_turn(tool_call(f"call_{n}", "multiply", ARGS_248_15)) for n in range(1, 12)]
    )
    result = run()
    assert_clean_failure(result, 1, "[Harness] 超过最大步骤数：8")  # after the loop: no step
    assert len(provider.requests) == lesson.MAX_STEPS == 8
    assert "call_8" not in json.dumps(provider.requests[-1].body)
    assert result.out.splitlines()[-1].startswith("step 8: multiply call_id=call_8 result=")
    assert "call_8 的 Tool Result 已写入历史" in result.err


# --- provider and network failures: exit 3 -----------------------------------------------------

FAILURES = {
    "ollama without tools": (
        Reply(
            status=400,
            json={
                "error": {
                    "message": "registry.ollama.ai/library/llama2:latest does not support tools",
                    "type": "api_error",
                }
            },
        ),
        "HTTP 400：registry.ollama.ai/library/llama2:latest does not support tools",
    ),
    "vllm without auto tool choice": (
        Reply(
            status=400,
            json={
                "object": "error",
                "message": '"auto" tool choice requires --enable-auto-tool-choice and '
                "--tool-call-parser to be set",
                "type": "BadRequestError",
                "param": None,
                "code": 400,
            },
        ),
        '"auto" tool choice requires --enable-auto-tool-choice',
    ),
    "llama.cpp without --jinja": (
        Reply(
            status=500,
            json={
                "error": {
                    "code": 500,
                    "message": "Unsupported param: tools",
                    "type": "server_error",
                }
            },
        ),
        "HTTP 500：Unsupported param: tools",
    ),
    "401": (
        Reply(
            status=401,
            json={
                "error": {
                    "message": "Incorrect API key provided: sk-onl***3210.",
                    "type": "invalid_request_error",
                    "code": "invalid_api_key",
                }
            },
        ),
        "HTTP 401：Incorrect API key provided",
    ),
    "401 echoing the whole key": (
        Reply(status=401, json={"error": {"message": f"key {KEY} is not valid"}}),
        "HTTP 401：key *** is not valid",
    ),
    "404 json": (
        Reply(
            status=404,
            json={
                "error": {
                    "message": "The model `test-model` does not exist",
                    "type": "invalid_request_error",
                    "code": "model_not_found",
                }
            },
        ),
        "HTTP 404：The model `test-model` does not exist",
    ),
    "429": (
        Reply(
            status=429,
            json={
                "error": {
                    "message": "You exceeded your current quota",
                    "type": "insufficient_quota",
                }
            },
        ),
        "HTTP 429：You exceeded your current quota",
    ),
    "error body is a json list": (
        Reply(
            status=400,
            json=[
                {
                    "error": {
                        "code": 400,
                        "message": "Invalid JSON payload received.",
                        "status": "INVALID_ARGUMENT",
                    }
                }
            ],
        ),
        "HTTP 400：Invalid JSON payload received.",
    ),
    "non-openai envelope": (
        Reply(
            status=400,
            json={
                "code": 20015,
                "message": "Model does not exist. Please check it carefully.",
                "data": None,
            },
        ),
        "HTTP 400：Model does not exist. Please check it carefully.",
    ),
    "500 plain": (
        Reply(status=500, json={"error": {"message": "Internal server error", "type": "server"}}),
        "HTTP 500：Internal server error",
    ),
    "502 html": (
        Reply(
            status=502,
            body=b"<html><head><title>502 Bad Gateway</title></head></html>",
            content_type="text/html",
        ),
        "502 Bad Gateway",
    ),
}


def concept_hint(words):
    """The hint of the CONCEPTS row that these words are about (the first row they match)."""
    return next(hint for pattern, _, hint in lesson.CONCEPTS if re.search(pattern, words))


# The hint each case must get: the concept the provider's words are about first, then a status
# that means one thing everywhere, otherwise "act on the provider's words" - or, with no words
# at all (an HTML page), anything but that.
NO_TOOLS_HINT = concept_hint("does not support tools")
MODEL_HINT = concept_hint("the model does not exist")
NO_WORDS = object()
FAILURE_HINTS = {
    "ollama without tools": ("Model", NO_TOOLS_HINT),
    "vllm without auto tool choice": ("Model", NO_TOOLS_HINT),
    "llama.cpp without --jinja": ("Model", NO_TOOLS_HINT),
    "401": ("Provider", lesson.STATUS_HINTS[401]),
    "401 echoing the whole key": ("Provider", lesson.STATUS_HINTS[401]),
    "404 json": ("Provider", MODEL_HINT),
    "429": ("Provider", lesson.HINT_BALANCE),  # "You exceeded your current quota" is billing
    "error body is a json list": ("Provider", lesson.HINT_WORDS),
    "non-openai envelope": ("Provider", MODEL_HINT),  # "Model does not exist"
    "500 plain": ("Provider", lesson.HINT_WORDS),
    "502 html": ("Provider", NO_WORDS),
}


@pytest.mark.parametrize(("reply", "reason_part"), FAILURES.values(), ids=FAILURES.keys())
def test_http_errors_exit_3_with_the_providers_own_words(
    run, provider, request, reply, reason_part
):
    link, hint = FAILURE_HINTS[request.node.callspec.id]
    provider.script(reply, FINAL)
    result = run()
    assert_clean_failure(result, 3, f"[{link}] step 1: HTTP ")
    first, second = result.err.splitlines()
    assert reason_part in first, first
    if hint is NO_WORDS:
        assert "建议：" in second and not second.endswith(lesson.HINT_WORDS), second
    else:
        assert second.endswith("建议：" + hint), second
    assert first.endswith(f"；端点 {provider.base_url}，模型 test-model")
    assert "最后一个成功事件：Harness 已就绪，user 消息已写入历史；" in second
    assert len(provider.requests) == 1  # one attempt per request: no retry on 429 or 5xx


def test_a_failure_on_the_second_request_names_the_tool_result_as_last_success(run, provider):
    provider.script(
        tool_turn(CALL_1), Reply(status=400, json={"error": {"message": "bad history"}})
    )
    result = run()
    assert_clean_failure(result, 3, "[Provider] step 2: HTTP 400：bad history")
    assert "最后一个成功事件：call_1 的 Tool Result 已写入历史" in result.err


def test_a_base_url_without_v1_gets_an_html_404_and_a_v1_hint(run, provider):
    result = run(OPENAI_BASE_URL=provider.base_url[: -len("/v1")])
    assert_clean_failure(result, 3, "[Provider] step 1: HTTP 404：")
    first, second = result.err.splitlines()
    assert "404 Not Found" in first and "/v1" in second
    assert [r.path for r in provider.requests] == ["/chat/completions"]


def test_connection_refused_exits_3_naming_the_network(run, closed_port_url):
    result = run(OPENAI_BASE_URL=closed_port_url)
    assert_clean_failure(result, 3, "[SDK/网络] step 1: ")
    first = result.err_lines[0]
    endpoint = f"；端点 {closed_port_url}，模型 test-model"
    assert first.endswith(endpoint), first
    assert urlsplit(closed_port_url).netloc in first[: -len(endpoint)]  # what did not answer


def test_a_read_timeout_exits_3_after_one_attempt(run, provider):
    provider.script(Reply(delay=30, json=FINAL), Reply(delay=30, json=FINAL))
    result = run(OPENAI_TIMEOUT="0.4")
    assert_clean_failure(result, 3, "[SDK/网络] step 1: ")
    first, second = result.err.splitlines()
    assert "0.4" in first and "Timeout" in first  # the limit that ran out, and the SDK's error
    assert "OPENAI_TIMEOUT" in second
    assert len(provider.requests) == 1  # no retry after a timeout


def test_the_command_line_reports_the_same_as_main(provider, capsys):
    """The big tables above run in-process; one run that writes to both streams also goes
    through a real process: step lines, a tool result, a masked report and the history."""
    replies = [tool_turn(CALL_1), FAILURES["401 echoing the whole key"][0]]  # 401: no retry
    provider.script(*replies)
    in_process = run_in_process(capsys, environment(provider), "--show-messages")
    provider.script(*replies)
    cli = run_subprocess(environment(provider), "--show-messages")
    assert (cli.code, cli.out, cli.err) == (in_process.code, in_process.out, in_process.err)
    assert cli.code == 3 and "[Provider] step 2: HTTP 401：key *** is not valid" in cli.err
    assert f"call_id=call_1 result={RESULT_3720}" in cli.out and '"role": "tool"' in cli.out


# --- hostile or broken input must never crash the harness ------------------------------------

HOSTILE = {
    "lone surrogate in the tool name": (
        [tool_turn(tool_call("call_1", "mul\ud800", ARGS_248_15)), FINAL],
        3,
    ),
    "lone surrogate in an argument key": (
        [tool_turn(tool_call("call_1", "multiply", '{"a":248,"b":15,"\\ud800":1}')), FINAL],
        0,
    ),
    "lone surrogate in the id": (
        [tool_turn(tool_call("call_\ud800", "multiply", ARGS_248_15)), FINAL],
        3,
    ),
    "lone surrogate in the answer": ([completion(content="答案\ud800 3720")], 3),
    "lone surrogate beside tool calls": ([tool_turn(CALL_1, content="\udfff"), FINAL], 3),
    "terminal escape in the answer": ([completion(content="\x1b]0;hacked\x07 3720")], 0),
    "finish_reason is a list": ([completion(content="3720", finish_reason=["stop"])], 3),
    "finish_reason is an object": ([completion(tool_calls=[CALL_1], finish_reason={"a": 1})], 3),
    "message is a string": (
        [{"choices": [{"index": 0, "message": "hello", "finish_reason": "stop"}]}],
        3,
    ),
    "content is a list of text parts": (
        [completion(content=[{"type": "text", "text": "3720"}])],
        3,
    ),
    "content has an image part": (
        [completion(content=[{"type": "image_url", "image_url": {}}])],
        3,
    ),
    "content is a number": ([completion(content=3720)], 3),
    "200 body is a json list": ([[{"error": {"message": "quota exceeded upstream"}}]], 3),
    "200 body is a json string": ([Reply(json="hello")], 3),
    "lone surrogate in reasoning_content": (
        [tool_turn(CALL_1, reasoning_content="思考\ud800"), FINAL],
        3,
    ),
    "200 body is cut off": ([Reply(body=b'{"choices": [', content_type="application/json")], 3),
    "200 body is empty": ([Reply(body=b"", content_type="application/json")], 3),
}


@pytest.mark.parametrize(("replies", "code"), HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_provider_output_never_crashes_the_harness(run, provider, replies, code):
    provider.script(
        *[json.loads(json.dumps(r)) if not isinstance(r, Reply) else r for r in replies]
    )
    result = run()
    assert result.code == code, result.everything
    assert "Traceback" not in result.everything
    assert "\x1b" not in result.everything
    assert (result.err == "") == (code == 0)


def test_a_surrogate_in_an_argument_key_reaches_the_terminal_escaped(run, provider):
    provider.script(tool_turn(tool_call("call_1", "multiply", '{"a":2,"b":3,"\\ud800":1}')), FINAL)
    result = run()
    assert result.code == 0
    returned = json.loads(result.out.splitlines()[1].split(" result=", 1)[1])
    assert returned["message"].endswith("['a', 'b', '\\ud800']")


def test_a_200_json_list_shows_the_providers_words(run, provider):
    provider.script([{"error": {"message": "quota exceeded upstream"}}])
    result = run()
    assert_clean_failure(result, 3, "[Provider] step 1: HTTP 200")
    assert "quota exceeded upstream" in result.err_lines[0]


def test_a_question_may_start_with_a_minus_sign(run, provider):
    provider.script(completion(content="-42"))
    assert run("-7 乘以 6").code == 0
    assert provider.requests[0].body["messages"][0]["content"] == "-7 乘以 6"


# --- the API key never appears, and masking does not garble short keys -----------------------


def test_a_key_echoed_just_before_the_cut_is_not_partly_printed(run, provider):
    message = "x" * 185 + f" key={KEY} rejected"
    provider.script(Reply(status=401, json={"error": {"message": message}}))
    result = run()
    assert result.code == 3
    assert KEY[:8] not in result.everything and "***" in result.err


def test_a_key_in_the_answer_or_history_is_masked(run, provider):
    provider.script(completion(content=f"你的 key 是 {KEY}"))
    result = run("--show-messages")
    assert result.code == 0
    assert KEY not in result.everything
    assert "Agent> 你的 key 是 ***" in result.out


def test_a_key_with_a_backslash_is_masked_in_its_json_form_too(run, provider):
    key = "sk-review\\ABCDEFGH1234"
    provider.script(completion(content=f"key={key}"))
    result = run("--show-messages", OPENAI_API_KEY=key)
    assert result.code == 0
    assert "ABCDEFGH" not in result.everything


def readme_masking_threshold():
    """The key length README promises to mask from: "8 个字符以上的 API Key ... 换成 `***`"."""
    readme = (SCRIPT.parent / "README.md").read_text(encoding="utf-8")
    (length,) = re.findall(r"(\d+) 个字符以上的 API Key 在任何输出里都会被换成 `\*\*\*`", readme)
    return int(length)


def test_a_key_exactly_as_long_as_readme_promises_is_masked(run, provider):
    key = "sk-k3y0123456789"[: readme_masking_threshold()]
    provider.script(completion(content=f"你的 key 是 {key}。"))
    result = run("--show-messages", OPENAI_API_KEY=key)
    assert (result.code, key in result.everything) == (0, False), result.everything
    assert "Agent> 你的 key 是 ***。" in result.out


def test_a_short_local_key_is_not_used_to_mask_other_text(run, closed_port_url):
    result = run(OPENAI_API_KEY="e", OPENAI_BASE_URL=closed_port_url)
    assert result.err.startswith("[SDK/网络] step 1: ")
    assert f"端点 {closed_port_url}" in result.err
    assert "***" not in result.err


# --- configuration that only the SDK can judge ---------------------------------------------


# Each points at the test server, so a missing check shows as a request that got through
# (the SDK drops the tab or newline, or percent-encodes the space, and sends anyway).
@pytest.mark.parametrize(
    "template",
    ["http://127.0.0.1:{port}/v 1", "http://127.0.0.1:{port}/\tv1", "http://127.0.0.1:{port}\n/v1"],
    ids=["space", "tab", "newline"],
)
def test_a_base_url_the_sdk_would_misread_exits_2_before_any_request(run, provider, template):
    result = run(OPENAI_BASE_URL=template.format(port=provider.port))
    assert result.code == 2 and result.err.startswith("[Harness] OPENAI_BASE_URL 不可用")
    assert "Traceback" not in result.everything and provider.requests == []


@settings(max_examples=100, deadline=None)  # each accepted URL builds a client: ~50 ms of TLS
@given(rest=st.text(max_size=30))
@example(rest="h/\udcffv1")
@example(rest="h\x00/v1")
@example(rest="h:99999/v1")
@example(rest="\xa1")  # not a valid internationalised host name: only the SDK refuses it
@example(rest="u:p@h/v1")  # credentials, a query, port 0, a fragment: the SDK's to judge
@example(rest="h/v1?api-version=1")
@example(rest="h/v1/chat/completions/")
@example(rest="h:0/v1#top")
@example(rest="[::1/v1")  # an IPv6 host without its closing bracket
def test_any_base_url_either_makes_a_client_or_is_a_configuration_error(rest):
    environ = {"OPENAI_API_KEY": KEY, "OPENAI_MODEL": "m", "OPENAI_BASE_URL": "http://" + rest}
    try:
        client = built_sdk_client(lesson.check_config(environ))
    except lesson.AgentStop as stop:
        assert (stop.link, stop.exit_code) == ("Harness", 2)
        assert stop.reason.startswith(("OPENAI_BASE_URL 不可用", "SDK 没能")), stop
    else:
        # The SDK would append /chat/completions a second time: that never reaches it
        url = client.base_url
        assert not url.path.rstrip("/").endswith("/chat/completions"), str(url)


def test_an_exported_but_empty_base_url_means_the_official_endpoint(monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "")
    config = lesson.check_config(
        {"OPENAI_API_KEY": KEY, "OPENAI_MODEL": "m", "OPENAI_BASE_URL": ""}
    )
    sdk_client = built_sdk_client(config)
    assert str(sdk_client.base_url).rstrip("/") == "https://api.openai.com/v1"
    assert config["OPENAI_BASE_URL"] == "https://api.openai.com/v1"  # the report names it too


@pytest.mark.parametrize("timeout", ["1e308", "inf", "-1", "10000", "1 0"])
def test_an_unusable_timeout_is_a_configuration_error(run, provider, timeout):
    result = run(OPENAI_TIMEOUT=timeout)
    assert result.code == 2 and "OPENAI_TIMEOUT" in result.err
    assert provider.requests == []


def test_connection_errors_show_their_cause(run, closed_port_url):
    result = run(OPENAI_BASE_URL=closed_port_url)
    assert "Connection refused" in result.err.splitlines()[0]


def test_an_error_that_merely_mentions_tools_gets_no_no_tools_hint(run, provider):
    message = "thinking is enabled but reasoning_content is missing in assistant tool call message"
    provider.script(Reply(status=400, json={"error": {"message": message}}))
    result = run()
    assert result.code == 3 and message in result.err
    assert NO_TOOLS_HINT not in result.err


def test_the_client_uses_the_scripts_timeout_and_makes_one_attempt(monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    config = lesson.check_config({"OPENAI_API_KEY": KEY, "OPENAI_MODEL": "m"})
    client = built_sdk_client(config)
    assert client.max_retries == 0  # one attempt per request
    assert client.timeout.read == 60  # OPENAI_TIMEOUT's default
    assert client.timeout.connect == 5  # connecting fails fast whatever the read timeout
    client = built_sdk_client(dict(config, OPENAI_TIMEOUT=2.5))
    assert (client.timeout.read, client.timeout.connect) == (2.5, 2.5)


# --- real model output, replayed byte for byte from llama-server (tests/recordings) ----------


def replay(run, provider, *names, question=None):
    """Script the recorded replies; run with the recorded model and first question."""
    recorded = [recording(name) for name in names]
    provider.script(*[reply for _, reply in recorded])
    first_request = recorded[0][0]
    model = first_request["model"]
    result = run(question or first_request["messages"][0]["content"], OPENAI_MODEL=model)
    return result, [request for request, _ in recorded]


@pytest.mark.parametrize("name", ["01-call-written-as-fenced-text", "02-call-written-as-bare-text"])
def test_a_real_model_that_writes_its_call_as_text_is_stopped_not_answered(run, provider, name):
    result, (request,) = replay(run, provider, name)
    assert provider.requests[0].body == request  # we sent exactly what the real server got
    assert_clean_failure(result, 1, "[Provider] step 1: 模型把调用写成了文字")
    first, second = result.err_lines
    assert '"name": "multiply"' in first and second.endswith(lesson.HINT_WRITTEN_CALL)
    assert "Agent>" not in result.out and "call_id=" not in result.out


def test_a_recorded_call_after_a_preamble_is_still_a_call_written_as_text(run, provider):
    # Issue 29: a call written in the answer stops the loop wherever it stands, unexecuted
    _, reply = recording("01-call-written-as-fenced-text")
    body = json.loads(reply.body)
    message = body["choices"][0]["message"]
    message["content"] = "要计算 248 乘以 15：248 × 15 = 3840。\n" + message["content"]
    provider.script(Reply(body=json.dumps(body).encode(), content_type=reply.content_type))
    result = run()
    assert_clean_failure(result, 1, "[Provider] step 1: ")
    assert "Agent>" not in result.out and "call_id=" not in result.out
    assert len(provider.requests) == 1


def test_a_provider_stop_names_the_endpoint_and_model(run, provider):
    provider.script(Reply(body=b"<title>Open WebUI</title>", content_type="text/html"))
    first = run().err.splitlines()[0]
    assert "Open WebUI" in first
    assert first.endswith(f"；端点 {provider.base_url}，模型 test-model")


NATIVE_TURNS = {
    "shared-template": (
        ("03-native-tool-call-1.5b-step1", "04-native-tool-call-1.5b-step2"),
        ("xygMdONiWQQH0hPp5weylmWXzBEOLrix", 1517, "37 乘以 41 是 1517。"),
    ),
    # README's verified setup: this repository's templates/qwen2.5-coder-tools.jinja
    "repo-template": (
        ("10-repo-template-native-call-step1", "11-repo-template-final-answer-step2"),
        ("y7PBWlVu7egDlGw4bsnS9IBGXgLR7pWi", 3720, "3720 is the result of multiplying 248 by 15."),
    ),
}


@pytest.mark.parametrize("turn", NATIVE_TURNS)
def test_a_real_native_tool_call_runs_the_whole_turn(run, provider, turn):
    names, (call_id, product, answer) = NATIVE_TURNS[turn]
    result, requests = replay(run, provider, *names)
    assert [r.body for r in provider.requests] == requests  # both requests, byte-equal JSON
    assert (result.code, result.err) == (0, "")
    assert result.out.splitlines() == [
        "step 1: finish_reason=tool_calls",
        f'step 1: multiply call_id={call_id} result={{"status":"completed","result":{product}}}',
        "step 2: finish_reason=stop",
        f"Agent> {answer}",
    ]


def test_a_real_empty_answer_is_a_model_failure(run, provider):
    result, _ = replay(run, provider, "05-empty-final-answer")
    assert_clean_failure(result, 1, "[Model] step 1: 模型返回了空回答")


def test_a_real_output_cap_names_both_limits(run, provider):
    result, _ = replay(run, provider, "06-length-from-output-cap")
    assert_clean_failure(result, 1, '[Model] step 1: 模型没有正常结束：finish_reason="length"')
    assert "最后一个成功事件：step 1: 收到响应" in result.err


def test_a_real_server_without_jinja_gets_the_no_tools_hint(run, provider):
    _, reply = recording("07-500-tools-need-jinja")
    provider.script(reply, reply)
    result = run()
    assert_clean_failure(result, 3, "[Model] step 1: HTTP 500：tools param requires --jinja flag")
    assert result.err.splitlines()[1].endswith("建议：" + NO_TOOLS_HINT)
    assert len(provider.requests) == 1  # a 500 is not retried


# --- hostile or broken endpoints --------------------------------------------------------------

BROKEN = {
    "body broken off": broken_off(json.dumps(FINAL).encode()[:40]),
    "bad chunking": bad_chunked(),
    "broken gzip": bad_gzip(json.dumps(FINAL).encode()),
}


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param(BROKEN["body broken off"], id="body broken off"),
        pytest.param(BROKEN["bad chunking"], id="bad chunking"),
        pytest.param(BROKEN["broken gzip"], id="broken gzip"),
    ],
)
def test_a_response_that_breaks_off_is_connected_but_unread_not_unreachable(run, provider, reply):
    # the SDK reads the body inside its own call: its HTTP library's error, named as such
    provider.script(reply, reply)
    result = run()
    assert_clean_failure(result, 3, f"[SDK/网络] step 1: 连上了 127.0.0.1:{provider.port}，")
    first = result.err.splitlines()[0]
    assert "Error" in first  # the read error is named (RemoteProtocolError, DecodingError...)
    assert "连不上" not in result.err and len(provider.requests) == 1


@pytest.mark.parametrize("status", [200, 502])
def test_a_huge_hostile_error_page_is_quoted_only_in_part(run, provider, status):
    page = Reply(status=status, body=b"<title>" * 40_000, content_type="text/html")
    provider.script(page, page)
    result = run()
    assert_clean_failure(result, 3, f"[Provider] step 1: HTTP {status}")
    first = result.err.splitlines()[0]
    assert "<title>" in first and len(first) < 1000  # its start, not 280 KB of it


def test_thousands_of_tool_calls_in_one_response_run_none(run, provider):
    calls = [tool_call(f"call_{n}", "multiply", ARGS_248_15) for n in range(5000)]
    provider.script(tool_turn(*calls), FINAL)
    result = run()
    assert_clean_failure(result, 1, "[Harness] step 1: 一次要执行 5000 个调用")
    assert len(provider.requests) == 1 and "call_id=" not in result.out


def test_the_deprecated_function_call_finish_reason_stops_the_loop(run, provider):
    provider.script(completion(content=None, finish_reason="function_call"), FINAL)
    result = run()
    assert_clean_failure(
        result, 1, '[Provider] step 1: 模型没有正常结束：finish_reason="function_call"'
    )
    assert len(provider.requests) == 1


def test_a_200_that_cannot_be_parsed_does_not_claim_no_response_came(run, provider):
    provider.script(Reply(body=b'{"choices": [', content_type="application/json"))
    result = run()
    assert_clean_failure(result, 3, "[Provider] step 1: HTTP 200")
    assert "JSON" in result.err_lines[0] and "连不上" not in result.err


# --- the gate: a 200 body that is not a completion is the provider's failure (exit 3) --------

SSE_CHUNK = {
    "id": "chatcmpl-1",
    "object": "chat.completion.chunk",
    "choices": [{"index": 0, "delta": {"content": "3720"}, "finish_reason": None}],
}
MINIMAX_WORDS = (
    "login fail: Please carry the API secret key in the 'Authorization' field of the request header"
)
BAIDU_WORDS = "Access token invalid or no longer valid"
CHINESE_FINAL = json.dumps(completion(content="248 乘以 15 等于 3720。"), ensure_ascii=False)
# (the 200 reply, what the first line must say the body was, or the provider's words it quotes)
GATE = {
    "empty": (Reply(body=b"", content_type="application/json"), "空"),
    "event stream": (
        Reply(
            body=b"data: " + json.dumps(SSE_CHUNK).encode() + b"\n\ndata: [DONE]\n\n",
            content_type="text/event-stream",
        ),
        "data:",
    ),
    "html page": (
        Reply(
            body=b"<!DOCTYPE html><html><head><title>Sign in | Open WebUI</title></head>"
            b"<body><div id='app'></div></body></html>",
            content_type="text/html; charset=utf-8",
        ),
        "Sign in | Open WebUI",
    ),
    "html page echoing the key": (
        Reply(body=f"<title>Invalid token {KEY}</title>".encode(), content_type="text/html"),
        "Invalid token ***",
    ),
    "gbk-encoded json": (
        Reply(body=CHINESE_FINAL.encode("gbk"), content_type="application/json"),
        "UnicodeDecodeError",
    ),
    "gzip without content-encoding": (
        Reply(body=gzip.compress(CHINESE_FINAL.encode()), content_type="application/json"),
        "UnicodeDecodeError",
    ),
    "minimax envelope": (
        Reply(json={"base_resp": {"status_code": 1004, "status_msg": MINIMAX_WORDS}}),
        MINIMAX_WORDS,
    ),
    "baidu envelope": (Reply(json={"error_code": 110, "error_msg": BAIDU_WORDS}), BAIDU_WORDS),
    "an error and no choices": (
        Reply(json={"error": {"message": "upstream model crashed", "code": 502}}),
        "upstream model crashed",
    ),
}


@pytest.mark.parametrize(("reply", "said"), GATE.values(), ids=GATE.keys())
def test_a_200_that_is_not_a_completion_is_the_providers_failure(run, provider, reply, said):
    provider.script(reply, FINAL)
    result = run("--show-messages")
    assert_clean_failure(result, 3, "[Provider] step 1: HTTP 200")
    assert said in result.err_lines[0], result.err
    assert len(result.err_lines[0]) < 600  # what it was or said, and at most the body's start
    assert len(provider.requests) == 1  # a 200 is not retried, and nothing more is sent
    assert json.loads(result.out) == [{"role": "user", "content": lesson.DEFAULT_QUESTION}]


def test_null_choices_beside_an_error_envelope_quote_the_providers_words(run, provider):
    envelope = {"status_code": 1002, "status_msg": "rate limit exceeded(RPM)"}
    body = {"id": "", "choices": None, "usage": {"total_tokens": 0}, "base_resp": envelope}
    provider.script(Reply(json=body))
    result = run()
    assert result.code in (1, 3) and "Traceback" not in result.everything
    assert result.err.startswith("[Provider] step 1: ")
    assert "rate limit exceeded(RPM)" in result.err_lines[0], result.err


def json_with(template, literal):
    """template as JSON bytes, with the string "@@" replaced by `literal` written as is."""
    return json.dumps(template).replace('"@@"', literal).encode()


UNSENDABLE_CALL = tool_call("call_1", "multiply", ARGS_248_15, extra_content="@@")
# A kept field that the SDK could not send back as strict JSON (rule: checked at receipt)
UNSENDABLE = {
    "reasoning_details with a lone surrogate": (
        json_with(tool_turn(CALL_1, reasoning_details="@@"), '[{"type":"text","text":"\\ud800"}]'),
        "UnicodeEncodeError",
    ),
    "extra_content with NaN": (
        json_with(tool_turn(UNSENDABLE_CALL), '{"google":{"thought_signature":NaN}}'),
        "ValueError",
    ),
    "extra_content with 1e999": (
        json_with(tool_turn(UNSENDABLE_CALL), '{"google":{"thought_signature":1e999}}'),
        "ValueError",
    ),
}


@pytest.mark.parametrize(("body", "error"), UNSENDABLE.values(), ids=UNSENDABLE.keys())
def test_a_kept_field_that_cannot_be_sent_back_stops_at_receipt(run, provider, body, error):
    provider.script(Reply(body=body, content_type="application/json"), FINAL)
    result = run()
    assert_clean_failure(result, 3, "[Provider] step 1: HTTP 200")
    assert error in result.err_lines[0], result.err  # why it cannot go back as it came
    assert len(provider.requests) == 1  # no second request carries it
    assert "call_id=" not in result.out  # and the call it came with never ran


# --- a never, tested as a property: no 200 body or lying header crashes the harness ----------

PROPERTY_KEY = "sk-property-secret-8a7b6c5d4e"
ODD_TEXT = st.sampled_from(
    [
        "\ud800",
        "a\udfffb",
        "\x1b]0;x\x07",
        "\u202e",
        "<think>x</think>",
        "<|im_end|>",
        '{"name":"multiply","arguments":{}}',
        PROPERTY_KEY,
        f"key={PROPERTY_KEY}",
        "",
        "   ",
    ]
)
HUGE = object()  # stands for 1e999, a number literal that parses to infinity
ODD_NUMBER = st.sampled_from([float("nan"), float("inf"), -float("inf"), HUGE, 10**400, -0.0])
SCALAR = st.none() | st.booleans() | st.integers() | ODD_NUMBER | ODD_TEXT | st.text(max_size=12)
JSON_VALUE = st.recursive(
    SCALAR,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
# Any nesting: shallow, as deep as the parser accepts (which depends on the CPython version and
# the stack), and deeper than any CPython's parser accepts. test_gate.py sweeps the band just
# below the parser's limit, place by place.
DEPTH = st.integers(0, 1_200) | st.just(50_000)
DEEP = object()  # stands for the nested list drawn with DEPTH
ODD_VALUE = st.just(DEEP) | JSON_VALUE


@st.composite
def completion_like(draw):
    """A chat completion with some of its fields replaced by odd JSON values."""
    call = {"id": "call_1", "type": "function", "function": {"name": "multiply", "arguments": "{}"}}
    call["function"]["arguments"] = draw(st.sampled_from([ARGS_248_15, '{"a":1e999,"b":1}', "[["]))
    message = {"role": "assistant", "content": draw(st.none() | ODD_TEXT | st.just("3720"))}
    if draw(st.booleans()):
        message["tool_calls"] = [call]
    body = completion(finish_reason=draw(st.sampled_from(["stop", "tool_calls", None])))
    body["choices"][0]["message"] = message
    odd_places = [
        (message, "content"),
        (message, "reasoning_content"),
        (message, "reasoning_details"),
        (message, "refusal"),
        (message, "tool_calls"),
        (call, "id"),
        (call, "extra_content"),
        (call["function"], "name"),
        (call["function"], "arguments"),
        (body["choices"][0], "finish_reason"),
        (body["choices"][0], "error"),
        (body, "choices"),
    ]
    for place, key in draw(st.lists(st.sampled_from(odd_places), max_size=3)):
        place[key] = draw(ODD_VALUE)
    return body


def to_json_text(value, depth, ensure_ascii=True):
    """JSON text as a careless server writes it: NaN and Infinity as bare words, HUGE as 1e999,
    DEEP as `depth` nested lists; lone surrogates escaped, or (ensure_ascii=False) as they are."""
    literal = {id(DEEP): "[" * depth + "]" * depth, id(HUGE): "1e999"}
    text = json.dumps(value, ensure_ascii=ensure_ascii, default=lambda o: f"@@{id(o)}@@")
    return re.sub(r'"@@(\d+)@@"', lambda match: literal.get(int(match[1]), match[0]), text)


ENVELOPES = st.sampled_from(
    [
        lambda words: {"error": {"message": words}},
        lambda words: {"base_resp": {"status_code": 1004, "status_msg": words}},
        lambda words: {"error_code": 110, "error_msg": words},
        lambda words: [{"error": {"message": words}}],
        lambda words: words,
    ]
)


@st.composite
def body_bytes(draw):
    """The bytes of a 200 body: arbitrary, or JSON that is odd in value or in encoding."""
    kind = draw(st.sampled_from(["bytes", "completion", "envelope", "page"]))
    if kind == "bytes":
        return draw(st.binary(max_size=300))
    if kind == "page":
        return f"<html><title>{draw(ODD_TEXT)}</title></html>".encode("utf-8", "surrogatepass")
    depth = draw(DEPTH)
    value = draw(completion_like()) if kind == "completion" else draw(ENVELOPES)(draw(ODD_VALUE))
    odd = ["raw-surrogates", "gbk", "utf-16", "gzip"]
    encoding = draw(st.sampled_from(["utf-8"] * len(odd) + odd))
    text = to_json_text(value, depth, ensure_ascii=encoding == "utf-8")
    if encoding == "raw-surrogates":  # the surrogate itself, not its escape: not UTF-8
        return text.encode("utf-8", "surrogatepass")
    if encoding == "gzip":
        return gzip.compress(text.encode("utf-8", "surrogatepass"))
    if encoding == "gbk":  # Chinese text, as a server on a GBK locale writes it
        return text.replace('"3720"', '"三千七百二十"').encode("gbk", "replace")
    if draw(st.booleans()):
        text = "data: " + text + "\n\n"
    return text.encode(encoding, "surrogatepass")


@st.composite
def replies(draw):
    """One reply: the body, with a Content-Type that may lie, or framing that lies."""
    body = draw(body_bytes())
    content_type = draw(
        st.sampled_from(
            ["application/json", "text/event-stream", "text/html", "application/json; charset=gbk"]
        )
    )
    lies = ["short length", "long length", "gzip", "chunked"]
    framing = draw(st.sampled_from(["plain"] * len(lies) + lies))
    if framing == "plain":
        return Reply(body=body, content_type=content_type)
    headers = {"Content-Type": content_type}
    if framing == "gzip":  # says gzip, is not (or is, by chance)
        headers.update({"Content-Encoding": "gzip", "Content-Length": len(body)})
    elif framing == "chunked":
        headers["Transfer-Encoding"] = "chunked"
    else:
        headers["Content-Length"] = max(len(body) + (-7 if framing == "short length" else 50), 0)
    head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    return Reply(raw=f"HTTP/1.1 200 OK\r\n{head}\r\n".encode("latin-1") + body)


@pytest.fixture(scope="module")
def shared_provider():
    """One server for every example: a server per example would cost more than the run."""
    with ProviderServer() as server:
        yield server


COMMAND_LINE_RECURSION_LIMIT = 1000  # CPython's default: what `python3 lesson_03_...py` runs under


def run_quietly(environ, *args):
    """main() in this process as the command line runs it: on a thread of its own, so its stack
    starts as shallow (pytest's frames would hide a step that runs out of stack), under
    CPython's default recursion limit (hypothesis raises it while it runs a test). Output is
    captured without pytest's function-scoped capsys, which hypothesis cannot reset."""
    out, err, codes = io.StringIO(), io.StringIO(), []
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(COMMAND_LINE_RECURSION_LIMIT)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            thread = threading.Thread(target=lambda: codes.append(lesson.main(list(args), environ)))
            thread.start()
            thread.join(60)
    finally:
        sys.setrecursionlimit(limit)
    assert codes, "main() did not return within 60 s"
    return Run(codes[0], out.getvalue(), err.getvalue())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reply=replies(), show=st.booleans())
@example(reply=Reply(body=b"\x1f\x8b\x08\x00", content_type="application/json"), show=False)
@example(reply=Reply(body=json_with(FINAL, "NaN"), content_type="application/json"), show=True)
@example(
    reply=Reply(body=b"[" * 50_000 + b"]" * 50_000, content_type="application/json"), show=False
)
@example(
    reply=Reply(body=f"<title>{PROPERTY_KEY}</title>".encode(), content_type="text/html"),
    show=False,
)
@example(reply=Reply(json=completion(content=f"key={PROPERTY_KEY}")), show=True)
def test_no_200_body_or_header_crashes_the_harness_or_shows_the_key(shared_provider, reply, show):
    shared_provider.script(reply, reply, reply)  # a retry or a next step gets the same again
    environ = {
        "OPENAI_API_KEY": PROPERTY_KEY,
        "OPENAI_MODEL": "m",
        "OPENAI_BASE_URL": shared_provider.base_url,
        "OPENAI_TIMEOUT": "5",
    }
    result = run_quietly(environ, *(["--show-messages"] if show else []))
    assert result.code in (0, 1, 3), result.everything
    assert "Traceback" not in result.everything, result.everything
    if result.code == 0:  # an answer; after a tool ran, with at most the written-call note
        assert "Agent> " in result.out, result.everything
        assert len(result.err_lines) <= (1 if "call_id=" in result.out else 0), result.everything
    else:  # the two-line report
        assert len(result.err_lines) == 2 and "建议：" in result.err_lines[1], result.everything
    assert PROPERTY_KEY not in result.everything, result.everything


def deepest_json_here():
    """The deepest nesting json.loads accepts when called from here."""
    shallow, deep = 1, 100_000
    while shallow < deep:
        depth = (shallow + deep + 1) // 2
        try:
            json.loads("[" * depth + "]" * depth)
            shallow = depth
        except RecursionError:
            deep = depth - 1
    return shallow


def test_a_200_envelope_nested_to_the_parsers_limit_is_still_the_providers_failure():
    deepest = deepest_json_here()
    for depth in range(deepest - 40, deepest + 10):
        body = ('{"x":' + "[" * depth + "]" * depth + "}").encode()
        with pytest.raises(lesson.AgentStop):
            lesson.read_reply(body)


# --- the self-check's fakes are what a provider sends ---------------------------------------


def attribute_paths(response):
    choice = response.choices[0]
    call = choice.message.tool_calls[0]
    return {
        "finish_reason": choice.finish_reason,
        "content": choice.message.content,
        "id": call.id,
        "type": call.type,
        "name": call.function.name,
        "arguments": call.function.arguments,
    }


def through_the_gate(body):
    return lesson.read_reply(json.dumps(body).encode())


def test_the_self_check_fakes_read_like_a_providers_reply():
    fake = lesson.fake_response("tool_calls", tool_calls=[lesson.fake_call("call_1")])
    real = tool_turn(CALL_1)
    assert attribute_paths(through_the_gate(fake)) == attribute_paths(through_the_gate(real))


def test_run_agent_treats_provider_replies_and_fakes_alike():
    real = lesson.run_fake(tool_turn(CALL_1), FINAL)
    fake = lesson.run_fake(
        lesson.fake_response("tool_calls", tool_calls=[lesson.fake_call("call_1")]),
        lesson.fake_response("stop", content="248 乘以 15 等于 3720。"),
    )
    assert real[0] == fake[0] == "248 乘以 15 等于 3720。"
    assert real[2] == fake[2] and real[3] == fake[3]
    assert real[1].requests == fake[1].requests


# --- review findings: each once reached the wrong outcome -------------------------------------


def test_a_reply_that_starts_with_a_utf8_bom_is_read(run, provider):
    # RFC 8259 §8.1 lets a parser ignore a BOM; the SDK's own parser did, so the gate must too
    provider.script(Reply(body=b"\xef\xbb\xbf" + json.dumps(FINAL).encode(), content_type=""))
    result = run()
    assert (result.code, result.out.splitlines()[-1]) == (0, "Agent> 248 乘以 15 等于 3720。")


@pytest.mark.xfail(
    strict=True,
    reason="script bug: a non-UTF-8 error body is quoted as mojibake, and the hint says to act "
    "on those words",
)
def test_an_error_body_that_is_not_utf8_is_described_not_quoted_as_mojibake(run, provider):
    body = json.dumps({"error": {"message": "余额不足"}}, ensure_ascii=False).encode("gbk")
    provider.script(Reply(status=400, body=body, content_type="application/json"))
    result = run()
    assert_clean_failure(result, 3, "[Provider] step 1: HTTP 400：")
    first, second = result.err.splitlines()
    assert "不是 UTF-8" in first and "\ufffd" not in result.err
    assert not second.endswith(lesson.HINT_WORDS)  # there are no words to act on


def test_a_body_key_named_like_an_sdk_internal_is_just_an_extra_field(run, provider):
    body = dict(FINAL, _fields_set=1)  # once collided with openai's BaseModel.construct()
    provider.script(body)
    result = run()
    assert (result.code, result.err) == (0, "")
    assert result.out.splitlines()[-1] == "Agent> 248 乘以 15 等于 3720。"
