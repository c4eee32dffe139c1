"""The outcome of one run of the command line, in-process or as a subprocess."""

from dataclasses import dataclass


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
