# /// script
# requires-python = ">=3.9"
# dependencies = ["openai>=1.109.1,<4", "socksio>=1,<2"]
# ///
"""第 3 课：跑通第一个 OpenAI-compatible Tool Calling Agent Loop（课文的可执行版本）。

课文例子里的一次 Turn（从提问到最终回答）有四条消息，多几次调用就多几条：
user -> assistant(tool_calls) -> tool(tool_call_id, result) -> assistant(final)

第一部分是课文（§1–§7，编号同课文），每条规则和它防的是什么都写在这里；第二部分是自检和 --demo
（没有 API Key 也能看 Loop 真跑）；第三部分只替第一部分格式化、判定细节、诊断真实世界的失败。
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import signal
import sys
import threading
import traceback
import unicodedata
from types import SimpleNamespace
from urllib.parse import quote

EXIT_OK, EXIT_STOPPED, EXIT_USAGE, EXIT_REQUEST_FAILED = 0, 1, 2, 3


# ======================== 第一部分：课文 ========================

# ---- §1 模型只申请调用，Python 才执行工具 ----
# 名词只在这里定义一次。Model：生成文字和调用请求的模型。Provider：把模型放在 HTTP 接口后面的
# 服务（OpenAI、DeepSeek、本机的 llama-server……）。SDK：替我们发 HTTP 请求的 openai 包。
# Harness：这个文件，负责发请求、查响应、执行工具、决定何时停。Final：不再调用工具的最终回答。
# 模型从不亲手计算。它在回复里下一张“工具订单”，例如（arguments 是 JSON 字符串，不是对象）：
#   {"id": "call_1", "type": "function",
#    "function": {"name": "multiply", "arguments": "{\"a\":248,\"b\":15}"}}
# Python 校验后执行 multiply，把结果 3720 交还给模型，模型下一次才写出最终回答。
# 这是普通的 Tool Calling Loop，不是在复现 ReAct：后者还要求推理轨迹与动作交错生成。
DEFAULT_QUESTION = "帮我算一下 248 乘以 15"


# ---- §2 不要让模型控制 eval() ----
# 模型写出的字符串受用户输入和它读到的内容摆布；eval() 把字符串当 Python 代码运行，一句
# __import__("os").system(...) 就能读文件、启动进程。所以工具只收数据，运算由 Python 写死：模型把
# 这样一句代码当参数送来，它也只是一个字符串（--demo 场景 2）。
MAX_ABS_VALUE = 1_000_000


def multiply(a: int, b: int) -> int:
    """两个整数相乘；拒绝 bool、小数、字符串和超出范围的值，错误里写着收到的值本身。"""
    for name, value in (("a", a), ("b", b)):
        # bool 是 int 的子类（isinstance(True, int) 为真）：不先排除，True 会被悄悄当成 1
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{name} 必须是整数，收到的是 {value!r}")
        if abs(value) > MAX_ABS_VALUE:
            raise ValueError(f"{name} 的绝对值不能超过 {MAX_ABS_VALUE}")
    return a * b


# ---- §3 Schema 和执行侧要同时校验 ----
# TOOLS 是写给模型看的参数格式：模型照着写，却不保证写对（坏 JSON、没声明的工具、
# 字符串 "248"、多出的字段），各家端点按它检查的松紧也不同。所以执行前 Python 自己再查一遍。
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "multiply",
            "description": "Multiply two integers",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
                "additionalProperties": False,
            },
        },
    }
]
# 合法的参数不到 40 个字符；200 个字符最多嵌套 100 层，远低于解析器的递归上限，引用它也有界。
MAX_ARGUMENTS_CHARS = 200


def reject_duplicate_keys(pairs: list) -> dict:
    """json.loads 默认留下最后一个重复键；{"a":1,"a":248} 有歧义，直接拒绝。"""
    keys = [key for key, _ in pairs]
    if len(set(keys)) < len(keys):
        raise ValueError(f"工具参数有重复的键：{keys!r}")
    return dict(pairs)


def parse_arguments(arguments: object) -> dict:
    """把 arguments 字符串解析成 JSON 对象；不替模型转换类型，也不猜重复键的意思。"""
    if not isinstance(arguments, str):
        raise ValueError(f"工具参数必须是 JSON 字符串，不是 {type(arguments).__name__}")
    if not arguments.strip():
        raise ValueError("工具参数为空，multiply 需要 a 和 b")
    if len(arguments) > MAX_ARGUMENTS_CHARS:
        raise ValueError(f"工具参数超过 {MAX_ARGUMENTS_CHARS} 个字符")
    try:
        parsed = json.loads(arguments, object_pairs_hook=reject_duplicate_keys)
    except json.JSONDecodeError as error:
        raise ValueError(f"工具参数不是合法 JSON：{error.msg}") from None
    if not isinstance(parsed, dict):
        raise ValueError("工具参数必须是 JSON 对象")
    return parsed


def execute_tool(tool_call: object) -> str:
    """Router：校验一个 Tool Call 并执行 multiply，返回紧凑 JSON，从不抛异常（坏 JSON、缺键、类型
    不对都已变成 ValueError）。参数填错只是这一单错了：作为 {"status":"error"} 交回模型，让它改。"""
    try:
        function = getattr(tool_call, "function", None)
        name = getattr(function, "name", None)
        if name != "multiply":
            raise ValueError(f"未知工具：{name!r:.60}")  # 名字来自模型：引用它，但有界
        arguments = parse_arguments(getattr(function, "arguments", None))
        if set(arguments) != {"a", "b"}:
            raise ValueError(f"multiply 只接受 a 和 b，收到的键：{sorted(arguments)!r}")
        payload = {"status": "completed", "result": multiply(arguments["a"], arguments["b"])}
    except ValueError as error:
        payload = {"status": "error", "message": str(error)}
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"))


# ---- §4 有限步 Agent Loop ----
# MAX_STEPS 限每轮 Turn 发给模型的请求次数（不是消息条数），让花费和时间有尽头；模型为什么停不下来
# （反复调用、工具总报错、提示里没写何时收手）它不管，要另外查。
# 第 MAX_STEPS 次请求若仍要调用工具：工具照常执行、结果写进本地历史，但不会再有请求把它带给模型。
MAX_STEPS = 8
MAX_TOOL_CALLS = 32  # 失常的响应不该触发无界的工作；真实 Provider 的并行调用远少于此
HARNESS, SDK_NETWORK, PROVIDER, MODEL = "Harness", "SDK/网络", "Provider", "Model"
HINT_ENDPOINT = "这个端点的响应与 OpenAI 协议不一致，Harness 不会替它猜；换模型或端点再试"
HINT_POLICY = "换一种问法，或查看 Provider 的内容策略"


class AgentStop(Exception):
    """Loop 停下：带着失败的一环、原因和建议（参数填错不停，交回模型）。第三部分的子类是 Loop 之外的
    停法（配置有错、请求失败）：异常的类决定退出码。"""

    exit_code = EXIT_STOPPED

    def __init__(self, link: str, reason: str, hint: str):
        super().__init__(reason)
        self.link = link
        self.reason = reason
        self.hint = hint
        self.step = None  # 第几步、被拒收的响应：由 run_agent 补上
        self.refused = None


# finish_reason 说 Provider 为什么停止生成，要与同一 choice 的 tool_calls 一致。length（到了 Token
# 上限被截断）、content_filter（被过滤）和不认识的值：消息可能只写了一半，调用一个都不执行，文字也
# 不当成 Final。只有一处有意与课文不同：有调用时也认 stop（同样是自然结束），有的端点对没发
# tool_choice 的请求就这样回：Google 的兼容端点（microsoft/autogen#4878）、经 OpenRouter 的 Qwen、
# Gemini 3（OpenRouterTeam/openrouter-examples-python#4、ai-sdk-provider#288）、OpenAI（ENTERPILOT/
# GoModel#124）。这样的调用照样要过 id 和 Router 的检查。

# 回传课文的 role、content、tool_calls，加上 Provider 要原样收回才能接着这一轮的不透明字段（推理、
# 签名；缺了回 HTTP 400）；别的私有字段带回去反而可能被拒。它们都不打印，收到时就按 SDK 序列化一次。
ECHOED_MESSAGE_FIELDS = ("reasoning_content", "reasoning_details")
ECHOED_CALL_FIELDS = ("extra_content",)


def request_bytes(value: object) -> bytes:
    """SDK 发请求时的序列化（严格 JSON、UTF-8）：NaN、无穷大、孤立的代理字符在这里抛 ValueError。"""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def provider_owned(source: object, names: tuple) -> dict:
    """source 上真的出现了的那几个字段（空字符串也算出现），值原样不动。"""
    return {n: getattr(source, n) for n in names if getattr(source, n, None) is not None}


def assistant_message_from_api(message: object) -> dict:
    """要存进历史的 assistant 消息：role、content、原样的 tool_calls，加上 Provider 要的字段。"""
    # null 与 "" 都合乎 OpenAI 协议，但 Ollama、旧版 LM Studio 拒收 null，llama-cpp-python 回 500
    saved = {"role": "assistant", "content": message.content or ""}
    if message.tool_calls:
        saved["tool_calls"] = [
            {
                "id": getattr(call, "id", None),  # 缺 id 的调用由 run_agent 拦下，这里只照抄
                "type": call.type,
                "function": {"name": call.function.name, "arguments": call.function.arguments},
                **provider_owned(call, ECHOED_CALL_FIELDS),
            }
            for call in message.tool_calls
        ]
    return {**saved, **provider_owned(message, ECHOED_MESSAGE_FIELDS)}


def clip(value: object, limit: int = 200) -> str:
    """任意外来的值变成有界的一行（换行变空格，孤立的代理字符写成 \\ud800），长了就截断。"""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=repr)
    text = re.sub(r"[\t\n\r]+", " ", text.encode("utf-8", "backslashreplace").decode()).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def final_answer(message: object) -> str:
    """stop 也可能不是回答，三种都停下：拒答；空回答（课文片段收下了空串）；写成文字的调用（端点没
    把它解析成 tool_calls，Harness 不替它猜、不执行）。返回要打印的回答：开头的推理块不打印。"""
    if getattr(message, "refusal", None):
        raise AgentStop(MODEL, f"模型拒绝回答：{clip(message.refusal)}", HINT_POLICY)
    text = without_reasoning(message.content or "")
    if not any(char.isprintable() and not char.isspace() for char in text):  # 零宽字符也看不见
        hint = "再问一次；仍为空就换更大的模型，或确认端点支持 Tool Calling"
        raise AgentStop(MODEL, "模型返回了空回答", hint)
    reject_call_written_as_text(text)
    return text


def run_agent(client: object, model: str, user_text: str, messages: list | None = None) -> str:
    """最多发 MAX_STEPS 次模型请求，返回最终回答；传入 messages 可在外面看到历史。
    与课文片段不同，响应要通过全部检查才写进历史（课文先写）：被拒收的响应不会混进会话。"""
    messages = [] if messages is None else messages
    messages.append({"role": "user", "content": user_text})
    for step in range(1, MAX_STEPS + 1):
        response = None  # 每一步先清空：请求本身失败时，没有“被拒收的响应”
        try:
            # 连不上、HTTP 错误、响应体读不了或不合协议：第三部分的客户端在这里停下并点名
            response = client.chat.completions.create(model=model, messages=messages, tools=TOOLS)
            choice = response.choices[0]
            message = choice.message
            shown = choice.finish_reason or json.dumps(choice.finish_reason)  # 空串、null 也看得见
            print(f"step {step}: finish_reason={clip(shown, 40)}")
            reply = assistant_message_from_api(message)
            if message.tool_calls:
                if choice.finish_reason not in ("tool_calls", "stop"):
                    raise finish_reason_stop(choice.finish_reason, with_tool_calls=True)
                ids = [getattr(call, "id", None) for call in message.tool_calls]
                if not all(ids) or len(set(ids)) < len(ids):  # 缺 id 或重复，结果就无法配对
                    raise AgentStop(PROVIDER, "Tool Call 缺少 id 或 id 重复", HINT_ENDPOINT)
                if len(ids) > MAX_TOOL_CALLS:
                    hint = f"上限是 {MAX_TOOL_CALLS}，一个都没执行；这个端点或模型的输出不正常"
                    raise AgentStop(HARNESS, f"一次要执行 {len(ids)} 个调用", hint)
                messages.append(reply)  # 先存 assistant：每条 Tool Result 都要回答历史里已有的调用
                for call in message.tool_calls:
                    result = execute_tool(call)
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
                    name, shown_id = clip(call.function.name, 60), clip(call.id, 80)
                    print(f"step {step}: {name} call_id={shown_id} result={result}")
                continue
            if choice.finish_reason == "stop":
                answer = final_answer(message)
                messages.append(reply)
                return answer
            raise finish_reason_stop(choice.finish_reason, with_tool_calls=False)
        except AgentStop as stop:  # 唯一记账的一处：停在第几步，被拒收的是哪条响应
            stop.step = step
            stop.refused = response
            raise
    hint = "模型一直在调用工具；检查问题、模型能力，以及工具错误是否反复出现"
    raise AgentStop(HARNESS, f"超过最大步骤数：{MAX_STEPS}", hint)


# ---- §5 tool_call_id 为什么不能丢 ----
# 一次回复可以要好几个调用，结果靠 tool_call_id 对上是哪一个，就像订单号。历史里 user 提问，
# assistant 说话或下单，tool 带 id 交回结果；工具定义在请求的 tools 里。Anthropic 的是另一套协议。


# ---- §6 运行与自检 ----
# --self-check 用假响应只验证本地代码（Router、参数校验、id 配对、控制流），证明不了 key、端点、
# 模型。在线运行设 OPENAI_API_KEY、OPENAI_MODEL，第三方端点再设 OPENAI_BASE_URL。出错时沿调用链
# Harness → SDK/网络 → Provider → Model → Assistant(tool_calls) → Router → Tool 找失败的一环。


# ---- §7 下一课从哪里接上 ----
# messages 只活在进程内存里，进程一退出就没了（--demo 场景 4 接着问，一轮 Turn 变成 8 条消息）。
# 要恢复，先要 Session（存下这组消息）或 Checkpoint（记下运行到哪一步、从哪里接着跑）。只有工具会发
# 邮件、付款、写文件，且崩溃后无法确认是否执行过时，才需要 Execution Ledger（记下有副作用的工具实际
# 做过什么）、幂等（重试同一个请求不会重复产生副作用）或人工核对。乘法没有副作用，用不着。


# ======================== 第二部分：自检与演示（动手改一改见 README） ========================


def expect(condition: bool, what: str) -> None:
    """代替 assert 语句：python -O 会删掉 assert 语句，这个函数不会。"""
    if not condition:
        raise AssertionError(what)


def fake_call(call_id: object, arguments: str = '{"a":248,"b":15}', name: str = "multiply") -> dict:
    """一个 Tool Call，写成 Provider 发来的 JSON 的样子（arguments 是 JSON 字符串）。"""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def routed(arguments: str = '{"a":248,"b":15}', name: str = "multiply") -> str:
    """Router 对一个调用的回答；调用的形状同 read_reply 交给 run_agent 的（call.function.name）。"""
    return execute_tool(SimpleNamespace(function=SimpleNamespace(name=name, arguments=arguments)))


def fake_response(finish_reason: object, content: object = None, tool_calls: object = None, **more):
    """一个 chat.completion 响应体，写成 Provider 发来的 JSON 的样子；more 是消息上别的字段。"""
    message = {"role": "assistant", "content": content, "tool_calls": tool_calls, **more}
    return {"choices": [{"index": 0, "message": message, "finish_reason": finish_reason}]}


def fake_turn(call_id: str, arguments: str = '{"a":248,"b":15}') -> object:  # 调用一次 multiply
    return fake_response("tool_calls", tool_calls=[fake_call(call_id, arguments)])


class FakeClient:
    """按顺序交出预设的响应体，其字节与真实的 HTTP 200 过同一道门；每次请求按 SDK 序列化存一份。"""

    def __init__(self, *responses: dict):
        self.responses = list(responses)
        self.requests = []
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self.create))

    def create(self, **request: object) -> object:
        self.requests.append(json.loads(request_bytes(request)))
        expect(self.responses, f"预设的响应用完了：Loop 发出了第 {len(self.requests)} 次请求")
        return read_reply([json.dumps(self.responses.pop(0)).encode()])


def run_fake(*responses: object) -> tuple:
    """用假客户端跑一次 Loop，返回 (回答或 AgentStop, 客户端, 历史, 打印的行)。"""
    client = FakeClient(*responses)
    messages = []
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        try:
            outcome = run_agent(client, "fake-model", DEFAULT_QUESTION, messages)
        except AgentStop as stop:
            outcome = stop
    return outcome, client, messages, printed.getvalue().splitlines()


ANSWER = "248 乘以 15 等于 3720。"
RESULT_3720 = '{"status":"completed","result":3720}'
CODE_AS_ARGUMENT = '{"a":"__import__(\'os\').system(\'ls\')","b":15}'  # §2：模型把一句代码当参数


def check_multiply() -> None:
    expect(multiply(248, 15) == 3720, "multiply(248, 15) 应为 3720")
    for a, b in [(True, 15), (248, False), ("248", 15), (248.0, 15), (None, 15), (10**6 + 1, 2)]:
        try:
            multiply(a, b)
        except ValueError:
            continue
        raise AssertionError(f"multiply({a!r}, {b!r}) 应被拒绝")


def check_schema_and_router() -> None:
    parameters = TOOLS[0]["function"]["parameters"]
    integer = {"type": "integer"}
    expect(parameters["properties"] == {"a": integer, "b": integer}, "a、b 都应是 integer")
    expect(sorted(parameters["required"]) == ["a", "b"], "a、b 都应是必填")
    expect(parameters.get("additionalProperties") is False, "Schema 应禁止多余字段")
    expect(routed() == RESULT_3720, f"成功结果应是紧凑 JSON：{RESULT_3720}")
    bad = ['{"a":248,"b":15,"c":1}', '{"a":248}', '{"a":1,"a":248,"b":15}', '{"a":248,', "[1, 2]"]
    bad += ["", '{"a":"248","b":15}', '{"a":true,"b":15}', "[" * 100_000, CODE_AS_ARGUMENT]
    for arguments in bad:
        result = json.loads(routed(arguments))
        expect(result["status"] == "error", f"{arguments[:30]} 应得到受控错误，实际 {result}")
    unknown = json.loads(routed(name="delete_files"))
    expect(unknown["status"] == "error" and "delete_files" in unknown["message"], "未知工具应受控")


def check_happy_path() -> None:
    outcome, client, messages, lines = run_fake(fake_turn("call_1"), fake_response("stop", ANSWER))
    expect(outcome == ANSWER and len(client.requests) == 2, f"应两次请求后得到回答：{outcome}")
    expect(set(client.requests[0]) == {"model", "messages", "tools"}, "请求只带三个参数")
    sent = client.requests[1]["messages"][-1]
    want = {"role": "tool", "tool_call_id": "call_1", "content": RESULT_3720}
    expect(sent == want, f"第二次请求应带 call_1 的结果 3720，实际 {sent}")
    roles = [m["role"] for m in messages]
    expect(roles == ["user", "assistant", "tool", "assistant"], f"消息序列不对：{roles}")
    expect(messages[1]["content"] == "", "调用旁的 content 应存成空串：null 会被 Ollama 拒收")
    call_line = f"step 1: multiply call_id=call_1 result={RESULT_3720}"
    article = ["step 1: finish_reason=tool_calls", call_line, "step 2: finish_reason=stop"]
    expect(lines == article, f"步骤行与课文不同：{lines}")


def check_pairing() -> None:
    two_calls = [fake_call("call_1"), fake_call("call_2", '{"a":6,"b":7}')]
    both = fake_response("tool_calls", tool_calls=two_calls)
    _, client, _, _ = run_fake(both, fake_response("stop", "好"))
    results = client.requests[1]["messages"][2:]
    pairs = [(m["tool_call_id"], json.loads(m["content"])["result"]) for m in results]
    expect(pairs == [("call_1", 3720), ("call_2", 42)], f"结果应按 tool_call_id 配对：{pairs}")


def check_stops() -> None:
    calls = [fake_call("call_1")]
    stop_with_calls = fake_response("stop", tool_calls=calls)
    outcome, client, _, lines = run_fake(stop_with_calls, fake_response("stop", ANSWER))
    expect(outcome == ANSWER and len(client.requests) == 2, f"Tool Call + stop 应执行：{outcome}")
    expect(lines[0] == "step 1: finish_reason=stop", f"步骤行应显示真实的 finish_reason：{lines}")
    cases = {
        "finish_reason=length": fake_response("length", content="248 乘以 15 等于"),
        "finish_reason=content_filter": fake_response("content_filter", content="..."),
        "未知 finish_reason": fake_response("eos", content="3720"),
        "Tool Call + length": fake_response("length", tool_calls=[fake_call("c", '{"a":2')]),
        "Tool Call + content_filter": fake_response("content_filter", tool_calls=calls),
        "缺少 id": fake_response("tool_calls", tool_calls=[fake_call(None)]),
        "重复 id": fake_response("tool_calls", tool_calls=calls * 2),
        "tool_calls 为空": fake_response("tool_calls", tool_calls=[]),
        "choices 为空": {"choices": []},
        "空回答": fake_response("stop", content=" \u200b"),
        "拒答": fake_response("stop", refusal="I can't help with that."),
        "只有 think 块": fake_response("stop", content="<think>3720</think>"),
        "写成文字的调用": fake_response("stop", content='{"name":"multiply","arguments":{}}'),
    }
    for label, response in cases.items():  # 第二条预设回答只在 Loop 错误地接着请求时才用得上
        outcome, client, messages, _ = run_fake(response, fake_response("stop", ANSWER))
        expect(isinstance(outcome, AgentStop), f"{label} 应停下 Loop，实际返回 {outcome!r}")
        expect(len(messages) == 1 and len(client.requests) == 1, f"{label} 不应执行或记入任何东西")


def check_max_steps() -> None:
    outcome, client, messages, _ = run_fake(*[fake_turn(f"call_{n}") for n in range(2 * MAX_STEPS)])
    stopped = getattr(outcome, "reason", "")
    expect(stopped == f"超过最大步骤数：{MAX_STEPS}", f"应停在步数上限：{outcome}")
    expect(len(client.requests) == MAX_STEPS, f"应正好发出 {MAX_STEPS} 次请求")
    last = f"call_{MAX_STEPS - 1}"
    expect(messages[-1].get("tool_call_id") == last, "最后一次工具结果应写入本地历史")
    expect(last not in json.dumps(client.requests[-1]), "最后一次工具结果不应发给模型")


def check_provider_fields() -> None:
    signature = {"google": {"thought_signature": "c2lnbmF0dXJl"}}
    call = {**fake_call("functions.multiply:0"), "extra_content": signature}
    details = [{"type": "reasoning.encrypted", "data": "b3BhcXVl"}]
    private = dict(reasoning_content="先调用乘法工具", reasoning_details=details, reasoning="私有")
    first = fake_response("tool_calls", content="<think>先乘</think>", tool_calls=[call], **private)
    final = fake_response("stop", content="<think>写出结果</think>\n\n" + ANSWER)
    outcome, client, _, lines = run_fake(first, final)
    echoed = client.requests[1]["messages"][1]
    expect(echoed.get("reasoning_content") == "先调用乘法工具", "reasoning_content 应原样回传")
    expect(echoed.get("reasoning_details") == details, "reasoning_details 应原样回传")
    expect(echoed["tool_calls"][0].get("extra_content") == signature, "extra_content 应原样回传")
    expect(echoed["content"] == "<think>先乘</think>", "content 应原样回传，think 块也不动")
    expect("reasoning" not in echoed, "其他私有字段不应回传")
    expect(outcome == ANSWER, f"打印的回答应去掉 think 块：{outcome!r}")
    private_words = ("先调用乘法工具", "先乘", "写出结果", "b3Bh")
    expect(not any(word in line for word in private_words for line in lines), "推理不应打印")


SELF_CHECKS = [
    ("multiply 拒绝 bool、字符串、小数、None 和超范围的值", check_multiply),
    ("Schema 只许整数 a、b；Router 把坏参数、代码、未知工具变成受控错误", check_schema_and_router),
    ("两次请求跑通，第二次请求带 call_1 与 3720", check_happy_path),
    ("并行的两个 Tool Call 按 tool_call_id 配对", check_pairing),
    ("Tool Call + stop 照常执行；截断、过滤、缺 id、空回答、写成文字的调用：都停下", check_stops),
    ("MAX_STEPS 限制请求次数，最后的结果不发给模型", check_max_steps),
    ("Provider 要求带回的字段原样回传，推理不打印", check_provider_fields),
]


def self_check() -> int:
    """用写成 JSON 的假响应逐项离线检查（它们也过 read_reply）；失败时指出是哪一项，退出码 1。"""
    for number, (name, check) in enumerate(SELF_CHECKS, start=1):
        try:
            check()
        except AssertionError as error:  # 别的异常是代码自己的 bug：main 连 traceback 一起打印
            print(f"[{number}/{len(SELF_CHECKS)}] 失败：{name}：{error}", file=sys.stderr)
            print("self-check failed", file=sys.stderr)
            return EXIT_STOPPED
        print(f"[{number}/{len(SELF_CHECKS)}] ok  {name}")
    print("self-check passed")
    return EXIT_OK


def demo() -> int:
    """没有 API Key 也能看 Loop 真跑：预设的响应体过 read_reply，再喂给真正的 run_agent。"""
    article = [fake_turn("call_1"), fake_response("stop", ANSWER)]
    as_data = [fake_turn("call_1", CODE_AS_ARGUMENT), fake_turn("call_2", '{"a":"248","b":15}')]
    as_data += [fake_turn("call_3"), article[1]]
    cut = fake_response("length", tool_calls=[fake_call("call_1", '{"a":248,"b')])  # 只生成了一半
    again = [fake_turn("call_2", '{"a":3720,"b":2}'), fake_response("stop", "再乘以 2 是 7440。")]
    both = [DEFAULT_QUESTION, "再乘以 2 呢？"]
    scenes = [  # (标题, 依次问的问题, 预设的响应)；同一场景的几个问题共用一个 messages
        ("§4 课文的一轮：两次请求，中间执行一次工具", [DEFAULT_QUESTION], article),
        ('§2–§3 参数只是数据：一句代码、字符串 "248" 都作为错误交回', [DEFAULT_QUESTION], as_data),
        ("§4 Tool Call 被 length 截断：Loop 停下，一个工具都不执行", [DEFAULT_QUESTION], [cut]),
        ("§7 在同一个 messages 上接着问：一轮 Turn 变成一段会话", both, [*article, *again]),
    ]
    for number, (title, questions, responses) in enumerate(scenes, start=1):
        print(f"== 场景 {number}/{len(scenes)}：{title}")
        client = FakeClient(*responses)
        messages = []
        for question in questions:
            try:
                print("Agent> " + run_agent(client, "demo", question, messages))
            except AgentStop as stop:
                report(stop, {}, messages, file=sys.stdout)
        if number == 1:  # 课文的一轮：四条消息
            print(json.dumps(messages, ensure_ascii=False, indent=2))
        if number == len(scenes):  # 同一个列表里的两轮 Turn，一条消息一行
            for message in messages:
                print(json.dumps(message, ensure_ascii=False))
            print(f"这 {len(messages)} 条消息只在内存里；下一课把它们存成 Session 或 Checkpoint")
        print()  # 场景之间空一行
    return EXIT_OK


# ======================== 第三部分：附录——真实世界的防护 ========================
# 按一次运行碰到外部世界的顺序排，每节一套机制；规则的含义都在第一部分，这里只格式化、判定、诊断。

# ---- 配置进来：环境只由 main 读一次；只有确定的错才在发请求之前拦下（退出码 2） ----
VARIABLES = ("OPENAI_API_KEY", "OPENAI_MODEL", "OPENAI_BASE_URL", "OPENAI_TIMEOUT")
# 像 key 的一段：sk-…、gsk_…、xai-…、AIza…、JWT、32 位以上的字母数字（智谱）、UUID（火山方舟）
KEY_LIKE = re.compile(
    r"\b(?:sk|gsk|xai)[-_][\w-]{8,}|\bAIza[\w-]{20,}|\beyJ[\w-]{10,}\.[\w.-]+|[A-Za-z0-9]{32,}"
    r"|\b[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}\b"
)
URL_FIX = "只写协议、主机、端口和路径，照 Provider 文档写"
# fmt: off
MISTAKES = [  # (只查哪个变量, 认出这种错的正则, 错在哪, 怎么改)：人常犯、而且确定是错的
    ("", r"""["'“‘].*["'”’]""", "两边带着引号（多半是从 .env 文件连引号一起复制的）", "去掉引号"),
    ("", r"\$\{?[A-Za-z_]\w*\}?|%[A-Za-z_]\w*%", "是没展开的变量名", "单引号里的 $X 不展开"),
    ("", r".*(\.\.\.|…|<[^<>]*>|\byour[-_]|provider\.example).*", "还是 README 或课文里的占位符",
     "换成你自己的真实值"),
    ("OPENAI_API_KEY", r"(?i)bearer\s.*", "开头多了 Bearer（SDK 会自己加）", "只留 key"),
    ("OPENAI_BASE_URL", r"[!-~]*://[^/]*@[!-~]*|[!-~]*\?[!-~]*",
     "地址里不能写用户名密码（SDK 会改用它们认证）或 ?查询参数（SDK 把路径拼在它后面）", URL_FIX),
    ("OPENAI_BASE_URL", r"[!-~]*/chat/completions/*", "写到了 /chat/completions", "写到它之前为止"),
    ("OPENAI_BASE_URL", r"(?=[!-~]*$)(?!(?i:https?)://[^/?#@]+(/|$)).*",
     "要以 http:// 或 https:// 开头", URL_FIX),
]
# fmt: on


class ConfigError(AgentStop):  # 配置里确定的错（Harness 这一环），还没发出任何请求
    exit_code = EXIT_USAGE


def check_config(environment: dict) -> dict:
    """在发出任何请求之前，只拦下确定的错；返回之后用到的全部值。"""
    values = {name: environment.get(name, "").strip() for name in VARIABLES}
    for name in [name for name in VARIABLES[:2] if not values[name]]:
        local = "（本地服务不校验 key，可填 local）" if name == "OPENAI_API_KEY" else ""
        raise ConfigError(HARNESS, f"缺少环境变量 {name}", f"export {name}=...{local}")
    for name, value in values.items():
        problem = variable_problem(name, value) if value else ()
        if problem:  # key 的值不打印（别的值里像 key 的段，输出时由遮罩换掉）
            shown = "" if name == "OPENAI_API_KEY" or "@" in value else f"（{clip(value, 120)}）"
            raise ConfigError(HARNESS, f"{name} 不可用{shown}：{problem[0]}", problem[1])
    config = {"api_key": values["OPENAI_API_KEY"], "model": values["OPENAI_MODEL"]}
    config["base_url"] = values["OPENAI_BASE_URL"] or "https://api.openai.com/v1"  # SDK 就不读环境
    config["timeout"] = float(values["OPENAI_TIMEOUT"] or 60)  # SDK 默认等 10 分钟，学习时太久
    return {**config, "environment": environment}


def variable_problem(name: str, value: str) -> tuple:
    """一个变量犯了哪种确定的错：(错在哪, 怎么改)；没有错是 ()。"""
    for only, pattern, what, fix in MISTAKES:
        if only in ("", name) and re.fullmatch(pattern, value, re.S):
            return what, fix
    for at, char in enumerate(value, start=1):  # key 在 HTTP 头里、地址在网址里；模型名可以是中文
        half = unicodedata.normalize("NFKC", char)
        if char.isspace():
            return f"第 {at} 个字符是空白 {json.dumps(char)}", "删掉它（.env 文件要用 LF 换行）"
        if name != "OPENAI_MODEL" and not char.isascii() and half.isascii() and half.isprintable():
            return f"第 {at} 个字符是全角的「{char}」", f"换成半角的「{half}」（切到英文输入法）"
        if not char.isprintable() or (name != "OPENAI_MODEL" and not char.isascii()):
            return f"第 {at} 个字符 {json.dumps(char)} 不是 ASCII", "只用英文字母、数字和符号"
    seconds = re.fullmatch(r"\d+\.?\d*|\.\d+", value) and 0 < float(value) <= 3600
    if name == "OPENAI_TIMEOUT" and not seconds:
        return "要是 0 到 3600 之间的秒数", "例如 export OPENAI_TIMEOUT=60"
    return ()


# ---- 请求失败：一次请求只发一次；按 SDK 的异常类型和状态码分类，先引用 Provider 的原话 ----
HINT_BALANCE = "余额、额度或免费额度用完了，或账户欠费：到 Provider 控制台充值或开通付费，或换 key"
HINT_WORDS = "按上面 Provider 的原话处理"
HINT_MODEL = "检查 OPENAI_MODEL：与 Provider 模型列表一字不差、账户已开通；经网关时令牌要有权用它"
# fmt: off
PHRASES = [  # 状态码会误导时才认的说法（余额用完也回 400、403、429）：(说法, 失败的一环, 建议)
    (r"support (tools|tool use|function call)|param:? tools|tools param|tool choice requires",
     MODEL, "换支持 tools 的模型或端点（vLLM 开自动工具选择，llama.cpp 加 --jinja）；不用改工具"),
    (r"insufficient (balance|quota)|balance is insufficient|current quota|paid balance|arrearage"
     r"|overdue|good standing|free tier|余额不足|欠费|额度", PROVIDER, HINT_BALANCE),
    (r"bind your", PROVIDER, HINT_WORDS),  # 魔搭的 401：先去绑定阿里云账号，不是 key 错了
    (r"model\b.{0,60}(does not exist|not found)|not found the model|not activated the model"
     r"|endpoint that does not exist|not supported for format|无可用渠道|模型不存在"
     r"|无权(使用|访问)模型", PROVIDER, HINT_MODEL),
]
STATUS_HINTS = {  # 各家含义一致的状态码
    401: "检查 OPENAI_API_KEY：是否完整、没过期，是否属于 OPENAI_BASE_URL 那家 Provider（和地区）",
    402: HINT_BALANCE,
    404: "检查 OPENAI_BASE_URL 的路径（多以 /v1 结尾；智谱 /api/paas/v4，火山方舟 /api/v3）",
    429: "触发了频率、并发或用量限制：稍等再试（本课不重试）；一直如此就查控制台的限额",
}
# fmt: on
WORDS = r'"(?:message|msg|error_msg|status_msg|detail|error|raw)"\s*:\s*"((?:[^"\\]|\\.)*)"'


class RequestFailed(AgentStop):  # 没拿到能读的回复：请求失败，或 HTTP 200 的响应体不是回复
    exit_code = EXIT_REQUEST_FAILED


def provider_words(text: str) -> str:
    """Provider 的原话：错误体里给人看的话，不论信封，字符串里又是 JSON 的也读；网页去掉标签。"""
    if text.lstrip()[:1] not in ("{", "["):
        return " ".join(re.sub(r"<[^<>]*(>|$)", " ", text[:4000]).split())
    said = []
    for literal in re.findall(WORDS, text)[:3]:  # 只用正则读：不管它嵌套多深
        with contextlib.suppress(ValueError):
            literal = json.loads(f'"{literal}"')
        said.append(provider_words(literal) if literal.lstrip()[:1] in ("{", "[") else literal)
    return clip("：".join(dict.fromkeys(s for s in said if s.strip())), 4000)


def provider_failure(what: str, status: int, text: str) -> RequestFailed:
    """引用原话（没有就引用响应体）；建议先看说法，再看状态码，最后照原话办。"""
    words = provider_words(text)
    said = re.sub(r"%20|[\s_]+", " ", words.lower())
    link, hint = next(((k, h) for p, k, h in PHRASES if re.search(p, said)), (PROVIDER, ""))
    hint = hint or (HINT_MODEL if status == 404 and "model" in said else STATUS_HINTS.get(status))
    hint = hint or (HINT_WORDS if words else "看服务端日志，或换端点")
    return RequestFailed(link, f"{what}{clip(words or text) or '（响应体是空的）'}", hint)


def explain_request_failure(error: Exception, config: dict) -> RequestFailed:
    """SDK 报的失败（状态码不是 2xx，或连接出错、超时）按它的异常类型和状态码变成 RequestFailed。"""
    import openai

    if isinstance(error, openai.APIStatusError):
        status = error.status_code
        return provider_failure(f"HTTP {status}：", status, error.response.text)
    chain = [error.__context__, getattr(error.__context__, "__context__", None)]
    status = next((c.response.status_code for c in chain if hasattr(c, "response")), None)
    if status is not None:  # 处理错误状态时（SDK 读它的响应体：解压、解码）出的错，SDK 没有包装
        return provider_failure(f"HTTP {status}：响应体读不了，", status, clip(repr(error)))
    if not isinstance(error, openai.APIConnectionError):
        raise error  # 不是外部世界的失败，是 Harness 的 bug：原样往上抛
    hint = "检查地址、端口和服务是否已启动；本地服务（Ollama、llama.cpp、vLLM）用 http://"
    reason = "连不上服务器，或连上后没收到响应（TLS 出错的，原因里写着 SSL）"
    if isinstance(error, openai.APITimeoutError):
        reason = f"超时：{config['timeout']:g} 秒内没连上或没等到响应（连接至多 5 秒；本课不重试）"
        hint += "；本地模型慢就调大 OPENAI_TIMEOUT"
    names = ("http_proxy", "https_proxy", "all_proxy")  # SDK 的 HTTP 库照它们（大小写都算）走代理
    proxies = [n for n, v in config["environment"].items() if v and n.lower() in names]
    if proxies:  # 本机、内网的端点常常不该经过代理
        hint += f"；设着 {'、'.join(proxies)}：本机、内网的端点加进 NO_PROXY=127.0.0.1,localhost"
    cause = error.__cause__ or error  # HTTP 库的异常，它说的是哪一步断了（连接、TLS 证书……）
    what = f"{reason}（{type(cause).__name__}: {clip(str(cause), 120)}）"
    return RequestFailed(SDK_NETWORK, what, hint)


@contextlib.contextmanager
def ticking(stream: object):
    """等待时的进度：终端上每秒刷新一行临时状态，结束时擦掉；别处每 10 秒写一行。只显示，不限时。"""
    done = threading.Event()

    def tick() -> None:
        waited = 0
        while not done.wait(1.0):
            waited += 1
            text = f"…等待响应 {waited} 秒（Ctrl-C 可中断）"
            stream.put(f"\r{text}" if stream.erasable else f"{text}\n" if waited % 10 == 0 else "")
        stream.put("\r" + " " * 60 + "\r" if stream.erasable and waited else "")  # 步骤行在后面

    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    try:
        yield
    finally:
        done.set()
        ticker.join()


def make_client(config: dict, waiting: object) -> SimpleNamespace:
    """形状同 SDK 客户端（.chat.completions.create）；一个请求只发一次，代理、证书由 SDK 决定。"""
    try:
        import openai
        from openai import OpenAI  # noqa: F401  脚本旁边同名的 openai.py 里没有它
    except ImportError as error:
        hint = "激活 README 建的 .venv，或 pip install -r requirements.txt；自己的 openai.py 要改名"
        raise ConfigError(HARNESS, f"openai SDK 导入失败：{clip(str(error))}", hint) from None
    # SDK 会自己读 OPENAI_ORG_ID、OPENAI_PROJECT_ID（OpenAI 自己的概念）：告诉它不发这两个头
    headers = {"OpenAI-Organization": openai.Omit(), "OpenAI-Project": openai.Omit()}
    timeout = openai.Timeout(config["timeout"], connect=min(config["timeout"], 5.0))
    options = {"timeout": timeout, "max_retries": 0, "default_headers": headers}  # 超时不重算
    try:  # HTTP 库在这一刻读代理、证书的变量：它们或地址有错，就错在这里
        client = openai.OpenAI(api_key=config["api_key"], base_url=config["base_url"], **options)
    except Exception as error:
        what = f"SDK 没能用这台机器的设置创建客户端（{type(error).__name__}: {clip(str(error))}）"
        raise ConfigError(HARNESS, what, "检查 OPENAI_BASE_URL、代理和证书的变量") from None

    def create(**request: object) -> SimpleNamespace:
        raw = client.chat.completions.with_streaming_response  # 要的是响应体的字节
        try:
            with ticking(waiting), raw.create(**request) as response:
                return read_reply(response.iter_bytes())
        except Exception as error:  # RequestFailed 和 Harness 的 bug 由它原样抛出
            raise explain_request_failure(error, config) from None

    return SimpleNamespace(chat=SimpleNamespace(completions=SimpleNamespace(create=create)))


# ---- 字节变成回复：HTTP 200 的字节只在这里变成回复；读不了、形状不合协议，是 Provider 的失败 ----
MAX_REPLY_BYTES = 8 * 1024 * 1024  # 一个回复不过几十 KB；更大的不读完（解压炸弹也在这里停下）
MAX_DEPTH = 32  # 一个回复嵌套不到 10 层；更深的，之后引用、回传、显示时都可能递归出错


def read_reply(chunks: object) -> SimpleNamespace:
    """字节 → 文字 → JSON → Loop 读的字段，各查一次；解压、解码、解析时出错都算 Provider 的。"""
    body = bytearray()
    try:
        for chunk in chunks:
            body += chunk
            if len(body) > MAX_REPLY_BYTES:
                raise OverflowError
        data = json.loads(body.decode("utf-8-sig"))  # JSON 的标准允许开头的 BOM
        if nested_deeper(data, MAX_DEPTH):
            raise RecursionError(f"嵌套超过 {MAX_DEPTH} 层")
        request_bytes(data)  # 存进历史的部分下次照原样发回：发不回去的现在就说
    except Exception as error:
        raise RequestFailed(PROVIDER, *what_body_is(bytes(body), error)) from None
    choices = data.get("choices") if isinstance(data, dict) else None
    choice = choices[0] if isinstance(choices, list) and choices else None
    if not isinstance(choice, dict) or choice.get("error"):  # 信封里只有错误；OpenRouter 放在这里
        raise provider_failure("HTTP 200，但响应体里没有回复：", 200, body.decode())
    problem = reply_problem(choice.get("message"))
    if problem:
        raise RequestFailed(PROVIDER, f"HTTP 200，但回复不合 OpenAI 协议：{problem}", HINT_ENDPOINT)
    message = {"content": None, "tool_calls": None, **choice["message"]}  # Loop 读的几层变成对象
    if message["tool_calls"] is not None:
        calls = [{**c, "function": SimpleNamespace(**c["function"])} for c in message["tool_calls"]]
        message["tool_calls"] = [SimpleNamespace(**call) for call in calls]
    choice = {"finish_reason": None, **choice, "message": SimpleNamespace(**message)}
    return SimpleNamespace(**{**data, "choices": [SimpleNamespace(**choice)]})


def what_body_is(body: bytes, error: Exception) -> tuple:
    """读不了的 HTTP 200 响应体是什么（先看大小，再看读到哪一步出的错），和该查什么。"""
    kinds = [
        (len(body) > MAX_REPLY_BYTES, f"超过 {MAX_REPLY_BYTES >> 20} MB 还没完（也许是解压炸弹）"),
        (isinstance(error, UnicodeDecodeError), "不是 UTF-8 文本"),  # GBK，或没声明的压缩数据
        (not body.strip() and isinstance(error, json.JSONDecodeError), "是空的"),
        (isinstance(error, json.JSONDecodeError), "不是 JSON"),  # 网页、事件流（data: …）……
        (isinstance(error, (RecursionError, ValueError)), "不是能照原样发回的严格 JSON"),
        (True, "没能读完"),  # 解压出错、中途断开、声明的长度不对……
    ]
    what = next(what for matched, what in kinds if matched)
    seen = "" if what == "是空的" else f"（{type(error).__name__}: {clip(str(error), 80)}）"
    seen += f"：{clip(body[:200].decode(errors='replace'), 80)}" if body.strip() else ""
    return f"HTTP 200，但响应体{what}{seen}", "看服务端日志、中间的网关；地址要指向 API，不是网页"


def nested_deeper(value: object, levels: int) -> bool:
    """value 嵌套超过 levels 层时为真；最多只往下看 levels 层，自己不会递归出错。"""
    inner = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    return bool(inner) and (levels == 0 or any(nested_deeper(v, levels - 1) for v in inner))


def reply_problem(message: object) -> str:
    """choices[0].message 里 Loop 要读的字段，第一个缺了或类型不对的，说出名字；没问题是空串。"""
    if not isinstance(message, dict):
        return "choices[0] 里没有 message"
    if not isinstance(message.get("content"), (str, type(None))):
        return f"content 不是文本：{clip(message['content'], 80)}"
    calls = message.get("tool_calls")
    if not isinstance(calls, (list, type(None))):
        return f"tool_calls 不是列表：{clip(calls, 60)}"
    for number, call in enumerate(calls or [], start=1):
        fields = call if isinstance(call, dict) else {}
        function = fields["function"] if isinstance(fields.get("function"), dict) else {}
        texts = [function.get("name"), function.get("arguments"), fields.get("id") or ""]
        if fields.get("type") != "function" or not all(isinstance(text, str) for text in texts):
            return f"第 {number} 个 Tool Call 的 type、name、arguments 或 id 不对：{clip(call, 60)}"
    return ""


# ---- 回复是不是回答：finish_reason 的含义、推理块、写成文字的调用 ----
FINISH_REASONS = {  # OpenAI 协议里的值；表外的值原样引用：它是这个 Provider 自己的说法
    "length": (MODEL, "输出达到 Token 上限被截断", "调大输出上限，或换上下文更大的模型"),
    "content_filter": (PROVIDER, "内容被 Provider 过滤", HINT_POLICY),
    "tool_calls": (PROVIDER, "消息里却没有任何 Tool Call", HINT_ENDPOINT),
    "function_call": (PROVIDER, "OpenAI 已弃用的旧 functions 协议", HINT_ENDPOINT),
}


def finish_reason_stop(finish_reason: object, with_tool_calls: bool) -> AgentStop:
    """finish_reason 不是自然结束时的 AgentStop：说出它的含义；有调用时说明一个都没执行。"""
    unknown = "照这个值的字面意思查 Provider 的文档；它说不出原因（null、空串）就换模型或端点"
    meaning = (PROVIDER, "不在 OpenAI 协议里，是这个 Provider 自己的值", unknown)
    link, meaning, hint = FINISH_REASONS.get(str(finish_reason), meaning)  # 值也可能是 [] 或 {}
    shown = f"finish_reason={clip(json.dumps(finish_reason, ensure_ascii=False), 40)}（{meaning}）"
    if with_tool_calls:
        return AgentStop(link, f"有 Tool Call，但 {shown}：不可信，一个工具都没执行", hint)
    return AgentStop(link, f"模型没有正常结束：{shown}，不能当成最终回答", hint)


def without_reasoning(text: str) -> str:
    """去掉开头的推理块 <think>…</think>：可以连着几块，也可以只剩 …</think>；没写完就全是推理。"""
    rest = re.sub(r"^(?:(?:<think>)?(?:(?!<think>).)*?</think>\s*)+", "", text.lstrip(), flags=re.S)
    return "" if rest.startswith("<think>") else rest


# 写成文字的调用（服务端没解析出 tool_calls），规则从请求推出：所给工具的名字与它的一个参数绑在一起
# （"a": 248、a=248、<parameter=a>、>a</，前后都行），中间只隔 GLUE（标点、标签、键，不是一句话）。
# 不看名字的两条：模板的控制标记 <|…|>、<｜…｜>；回答一开头就是“名字 + 参数”的 JSON。`…` 是引用。
CONTROL_TOKEN = r"<\|[^<>|\s]{1,40}\|>|<｜[^<>｜\n]{1,40}｜"
GLUE = r"""(?:\s|[!#-\-/:;=-@\[-^`{-~]|"(?:\w+"\s*:)?|<(?:[^<>\n]{1,60}>)?|\[[A-Z_]{1,20}\]\w*"""
GLUE += r"""|json|\n\w[\w ]{0,20}:)"""  # 标签：<…>，也有 [ARGS] 这样的（Mistral）
VALUE = r"""\s*[:=](?!=)\s*(?:-?[\d.]+|[\\"'\[{<]|true|false|null)"""  # "a": 248、a=248 的后半
CALL_HEAD = r'\s*(?:(?:```|~~~)[^\n]*\n)?[\[{\s]*\{\s*"(?:name|tool_name|function)"\s*:\s*"[^"]*"'
CALL_HEAD += r'\s*,\s*"(?:arguments|parameters|args)"\s*:(?!\s*\{\s*"type"\s*:\s*"object")'


def reject_call_written_as_text(text: str) -> None:
    """回答其实是写成文字的调用（上面三条规则）时停下；从不从文字里解析、执行它。"""
    said = re.sub(r"(`+)(?!`).+?(?<!`)\1(?!`)", " ", text)  # 行内代码是引用，不是订单
    ordered = any(re.search(order_of(tool["function"]), said) for tool in TOOLS)
    if ordered or re.search(CONTROL_TOKEN, said) or re.match(CALL_HEAD, said):
        what = f"模型把调用写成了文字（或漏出了模板的控制标记），端点没解析出来：{clip(text, 120)}"
        hint = "让服务端解析出 tool_calls：vLLM、SGLang 开 tool-call parser；llama.cpp 加 --jinja，"
        hint += "模板要教对格式（Qwen2.5-Coder 用 templates/qwen2.5-coder-tools.jinja）；"
        hint += "Ollama 选带 tools 标签的模型"
        raise AgentStop(PROVIDER, what, hint)


def order_of(function: dict) -> str:
    """这个工具的订单：它的名字与它的一个参数绑在一起，前后都行，中间最多隔着 40 段 GLUE。"""
    name = rf"(?<![A-Za-z0-9_-]){re.escape(function['name'])}(?![A-Za-z0-9_-])"
    p = "|".join(map(re.escape, function["parameters"]["properties"]))
    bound = rf"""[\\"']*(?:{p})[\\"']*{VALUE}|<[^<>\n]*[\s="'](?:{p})\b[^<>\n]*>"""
    bound += rf"|(?<=>)\s*(?:{p})\s*</"  # JSON 键或关键字参数；参数标签；<arg_key>a</arg_key>
    return rf"{name}{GLUE}{{0,40}}?(?:{bound})|(?:{bound}){GLUE}{{0,40}}?{name}"


# ---- 文字出去：只显示课文讲到的字段；秘密只经过一道遮罩；每个字都经过同一个出口 ----
TERMINAL_UNSAFE = "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]"
SHOWN = {"role", "content", "tool_calls", "tool_call_id", "id", "type", "function", "name"}
SHOWN |= {"arguments", "choices", "message", "finish_reason"}  # 课文讲到的字段：一份允许名单


def as_json(value: object) -> str:
    """印给人看的 JSON：回复里的对象先变回 dict，再只留课文讲到的字段。"""
    plain = json.loads(json.dumps(value, default=vars))
    return json.dumps(for_display(plain), ensure_ascii=False, indent=2)


def for_display(value: object, key: str = "") -> object:
    """课文讲到的字段照常显示，别的（推理、签名、用量……）写成“（已省略）”；开头的推理块也一样。"""
    if isinstance(value, dict):
        return {k: for_display(v, k) if k in SHOWN else "（已省略）" for k, v in value.items()}
    if isinstance(value, list):
        return [for_display(item, key) for item in value]
    if key == "content" and isinstance(value, str) and without_reasoning(value) != value.lstrip():
        return "<think>（已省略）</think>" + without_reasoning(value)
    return value


def secret_mask(environment: dict) -> object:
    """唯一的遮罩：秘密（key、像 key 的段、地址里的密码）三种写法从前 8 个字符起整段换成 ***。"""
    secrets = {environment.get("OPENAI_API_KEY", "").strip()}
    for value in environment.values():
        secrets.update(KEY_LIKE.findall(value) + re.findall(r"://[^/@\s:]*:([^/@\s]+)@", value))
    forms = {f for s in secrets for f in (s, json.dumps(s)[1:-1], quote(s, "", None, "replace"))}
    forms |= {form.replace("/", "\\/") for form in forms}  # JSON 也可以把 / 写成 \/（PHP 默认如此）
    starts = "|".join(re.escape(form[:8]) for form in forms if len(form) >= 8)
    alphabet = re.escape("".join(set("".join(forms))))
    secret = re.compile(f"(?:{starts})[{alphabet}]*" if starts else r"(?!)", re.IGNORECASE)

    def mask(text: str) -> str:
        text = re.sub(r"\b([A-Za-z][\w+.-]*://)[^\s/@]+@", r"\1***@", secret.sub("***", text))
        return re.sub(TERMINAL_UNSAFE, lambda match: f"\\u{ord(match[0]):04x}", text)

    return mask


class SafeOutput:
    """包住 stdout/stderr：每个字先过遮罩，写完就冲刷（2>&1 时先后才对）；写不出去就不再写。"""

    def __init__(self, stream: object, mask: object, dumb: bool = False):
        self.stream = stream
        self.mask = mask
        self.failed = stream is None  # 2>&- 时 sys.stderr 是 None
        self.erasable = not dumb and getattr(stream, "isatty", bool)()  # TERM=dumb 不认 \r

    def write(self, text: str) -> int:
        text = self.mask(text.replace("\r\n", "\n"))  # 单独的 \r 才转义
        encoding = getattr(self.stream, "encoding", None) or "utf-8"
        self.put(text.encode(encoding, "backslashreplace").decode(encoding))
        return len(text)

    def flush(self) -> None:
        self.put("")

    def put(self, text: str) -> None:
        try:
            if not self.failed:
                self.stream.write(text)
                self.stream.flush()
        except (OSError, ValueError):  # 管道已关、磁盘已满、流已关闭
            self.failed = True
            with contextlib.suppress(Exception):  # 退出时 Python 还会冲刷它：剩下的字节写进空设备
                os.dup2(os.open(os.devnull, os.O_WRONLY), self.stream.fileno())


# ---- 命令行：解析参数、运行，把停下变成两行说明；异常的类决定退出码，别的异常是 bug ----
HELP = """\
用法：python3 lesson_03_tool_calling_loop.py [--show-messages] [问题……] | --self-check | --demo
  问题默认“帮我算一下 248 乘以 15”；--show-messages 在结束后（失败时也一样）把消息历史打印成 JSON
  在线运行读 OPENAI_API_KEY、OPENAI_MODEL、OPENAI_BASE_URL、OPENAI_TIMEOUT（怎么填见 README）
退出码：0 有回答（不保证对）；1 Loop 被停下或程序出错；2 用法或配置错误；3 请求失败；130 Ctrl-C"""
OPTIONS = ("--self-check", "--demo", "--show-messages", "--help", "-h")


def run_command(argv: list, environment: dict, waiting: object) -> int:
    """解析参数（像 -x、--word 的才是选项，"-7 乘以 6" 仍是问题），然后自检、演示或在线运行。"""
    end = argv.index("--") if "--" in argv else len(argv)  # -- 之后的都是问题
    options = [arg for arg in argv[:end] if re.fullmatch(r"--?[A-Za-z][\w-]*(=.*)?", arg)]
    words = [arg for arg in argv[:end] if arg not in options] + argv[end + 1 :]
    question = " ".join(words).strip() or DEFAULT_QUESTION
    problem = next((f"不认识的选项：{clip(o, 80)}" for o in options if o not in OPTIONS), "")
    if re.search("[\ud800-\udfff]", question):  # 终端编码不对时，混进了 UTF-8 发不出去的字符
        problem = problem or "问题里有无法按 UTF-8 发送的字符，检查终端编码"
    if "-h" in options or "--help" in options:
        print(HELP)
        return EXIT_OK
    if problem:
        print(f"参数错误：{problem}\n{HELP.splitlines()[0]}（--help 看说明）", file=sys.stderr)
        return EXIT_USAGE
    if "--self-check" in options or "--demo" in options:
        return self_check() if "--self-check" in options else demo()
    messages = []
    config = {}
    refused = None
    try:
        config = check_config(environment)
        client = make_client(config, waiting)
        print("Agent> " + run_agent(client, config["model"], question, messages))
        return EXIT_OK
    except AgentStop as stop:
        report(stop, config, messages)
        refused = stop.refused
        return stop.exit_code
    finally:  # 失败了、按了 Ctrl-C 也打印：看得到停在了哪里
        if "--show-messages" in options and messages:
            print(as_json(messages))
        if "--show-messages" in options and refused is not None:
            print(f"被拒收、没有写进历史的响应（停下的原因在这里）：\n{as_json(refused)}")


def report(stop: AgentStop, config: dict, messages: list, file: object = None) -> None:
    """两行：哪一环、第几步、原因（端点的问题写明端点和模型）；最后一个成功事件和建议。"""
    endpoint = f"；端点 {config['base_url']}，模型 {clip(config['model'], 80)}" if config else ""
    last_ok = "Harness 已就绪，user 消息已写入历史"
    if messages and messages[-1]["role"] == "tool":
        last_ok = f"{clip(messages[-1]['tool_call_id'], 80)} 的 Tool Result 已写入历史"
    last_ok = f"step {stop.step}: 收到响应" if stop.refused is not None else last_ok
    last_ok = f"最后一个成功事件：{last_ok}；" if messages else ""
    where = f"step {stop.step}: " if stop.step else ""
    text = f"[{stop.link}] {where}{stop.reason}{endpoint}\n{last_ok}建议：{stop.hint}"
    print(text, file=file or sys.stderr)


def main(argv: list, environ: dict) -> int:
    """命令行入口，返回退出码。环境只在这里读一次；所有输出都经过 SafeOutput。"""
    environment = dict(environ)
    mask = secret_mask(environment)
    out = SafeOutput(sys.stdout, mask)
    err = SafeOutput(sys.stderr, mask, dumb=environment.get("TERM") == "dumb")
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            return run_command(argv, environment, err)
        except KeyboardInterrupt:  # 无论正在做什么、写什么（包括 | less 里的历史），都只是一行
            out.failed = True  # 没写完的输出不再写下去
            print("已中断（Ctrl-C）", file=err)
            return 130
        except Exception:  # 不是外部世界的失败，是 Harness 自己（或改过的代码）的 bug：原样可见
            bug = "[Harness] 程序自身出错了（不是 Provider 或网络的问题；改过代码先查改动）："
            print(bug, file=err)
            traceback.print_exc()
            return EXIT_STOPPED


if __name__ == "__main__":
    exit_code = main(sys.argv[1:], os.environ)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # 收尾时再按 Ctrl-C 也不打出 traceback
    sys.exit(exit_code)
