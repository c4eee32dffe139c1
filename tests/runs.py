"""The outcome of one run of the command line, in-process or as a subprocess."""

import json
import os
from dataclasses import dataclass

import openai

import lesson_03_tool_calling_loop as lesson


@dataclass
class Run:
    code: int
    out: str
    err: str

    @property
    def everything(self) -> str:
        return self.out + self.err

    @property
    def err_lines(self) -> list:
        return self.err.splitlines()


def run_in_process(capsys, env, *args) -> Run:
    """main() in this process with exactly `env`: the real SDK and real HTTP, no process start."""
    code = lesson.main(list(args), env)
    captured = capsys.readouterr()
    return Run(code, captured.out, captured.err)


def environ_runner(provider, capsys, monkeypatch, key):
    """A runner whose variables also go into os.environ, where the SDK's HTTP library reads them."""

    def runner(*args, **variables):
        settings = {"OPENAI_API_KEY": key, "OPENAI_MODEL": "m"}
        settings["OPENAI_BASE_URL"] = provider.base_url
        for name, value in {**settings, **variables}.items():
            monkeypatch.setenv(name, value)
        return run_in_process(capsys, dict(os.environ), *args)

    return runner


def sent_to_fake(provider, messages, key) -> tuple:
    """Send `messages` through the real SDK to a fake that checks them: (its 400 body as text,
    None) when it refuses, (None, the response) when it accepts."""
    with openai.OpenAI(api_key=key, base_url=provider.base_url, max_retries=0) as client:
        try:
            response = client.chat.completions.create(model="m", messages=messages, timeout=5)
        except openai.BadRequestError as error:
            return json.dumps(error.body, ensure_ascii=False), None
    return None, response


def pairing_problems(messages: list) -> list:
    """OpenAI's pairing rule, as a test oracle: each tool message answers a call of the assistant
    message before it, and every call is answered exactly once."""
    problems, open_ids = [], []
    for message in messages:
        if message["role"] == "tool":
            if message.get("tool_call_id") in open_ids:
                open_ids.remove(message["tool_call_id"])
            else:
                problems.append(f"结果 {message.get('tool_call_id')!r} 没有对应的调用")
            continue
        problems += [f"调用 {call_id!r} 没有结果" for call_id in open_ids]
        open_ids = [call["id"] for call in message.get("tool_calls", [])]
    return problems + [f"调用 {call_id!r} 没有结果" for call_id in open_ids]
