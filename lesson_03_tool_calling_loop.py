# /// script
# requires-python = ">=3.9"
# dependencies = ["openai>=1.109.1,<4", "socksio>=1,<2"]
# ///
"""第 3 课：跑通第一个 OpenAI-compatible Tool Calling Agent Loop（课文的可执行版本）。

一次 Turn：user -> assistant(tool_calls) -> tool(tool_call_id, result) -> assistant(final)
第一部分是课文（§1–§7，编号同课文），每条规则和它防的是什么都写在这里；第二部分是自检和 --demo（没有
API Key 也能看 Loop 真跑）；第三部分是附录：把外面的字节变成第一部分读的对象，格式化文字，诊断失败。
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import sys
import traceback
import unicodedata
from types import SimpleNamespace
from urllib.parse import quote, urlsplit

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


def parse_arguments(arguments: str) -> dict:
    """把 arguments 字符串解析成 JSON 对象；不替模型转换类型，也不猜重复键的意思。"""
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
        if tool_call.function.name != "multiply":
            raise ValueError(f"未知工具：{tool_call.function.name!r:.60}")  # 名字来自模型：有界
        arguments = parse_arguments(tool_call.function.arguments)
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
# finish_reason 说 Provider 为什么停止生成，要与同一 choice 的 tool_calls 一致：有调用时认
# tool_calls，也认 stop（同样是自然结束；有的端点对没发 tool_choice 的请求就这样回，出处见
# REFERENCE）；没有调用时只认 stop。别的值都说明这条消息不可信：调用一个都不执行，文字也不当
# 成 Final。别的值（eos、null、空串、已弃用的 function_call、智谱的 sensitive……）原样引用。
FINISH_REASONS = {
    "length": (MODEL, "输出达到 Token 上限被截断，可能只写了一半", "调大输出上限，或换个模型"),
    "content_filter": (PROVIDER, "内容被 Provider 过滤", HINT_POLICY),
    "tool_calls": (PROVIDER, "消息里却没有任何 Tool Call", HINT_ENDPOINT),
}
NOT_IN_PROTOCOL = (PROVIDER, "不是本课认得的结束原因", "照它的字面意思查 Provider 的文档")


def clip(value: object, limit: int = 200) -> str:
    """任意外来的值变成有界的一行（换行变空格，孤立的代理字符写成 \\ud800），长了就截断。"""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=repr)
    text = re.sub(r"[\t\n\r]+", " ", text.encode("utf-8", "backslashreplace").decode()).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


class AgentStop(Exception):
    """Loop 停下：带着失败的一环、原因和建议（参数填错不停，交回模型）。第三部分的子类是 Loop 之外的
    停法（配置有错、请求失败）：异常的类决定退出码。"""

    exit_code = EXIT_STOPPED

    def __init__(self, link: str, reason: str, hint: str):
        super().__init__(reason)
        self.link = link
        self.reason = reason
        self.hint = hint
        self.step = None  # 停在第几步：由 run_agent 补上


def unfinished(choice: object) -> AgentStop:
    """finish_reason 不是自然结束：说出它的含义；有调用时说明一个都没执行。"""
    link, meaning, hint = FINISH_REASONS.get(choice.finish_reason, NOT_IN_PROTOCOL)
    shown = f"finish_reason={clip(json.dumps(choice.finish_reason, ensure_ascii=False), 40)}"
    if choice.message.tool_calls:
        return AgentStop(link, f"有 Tool Call，但 {shown}（{meaning}）：一个工具都没执行", hint)
    return AgentStop(link, f"模型没有正常结束：{shown}（{meaning}），不能当成最终回答", hint)


# 回传课文的 role、content、tool_calls，加上 Provider 要原样收回才能接着这一轮的不透明字段（推理、
# 签名；缺了回 HTTP 400）；别的私有字段带回去反而可能被拒。它们都不打印。
ECHOED_MESSAGE_FIELDS = ("reasoning_content", "reasoning_details")
ECHOED_CALL_FIELDS = ("extra_content",)


def provider_owned(source: object, names: tuple) -> dict:
    """source 上真的出现了的那几个字段（空字符串也算出现），值原样不动。"""
    return {name: getattr(source, name) for name in names if getattr(source, name) is not None}


def assistant_message_from_api(message: object) -> dict:
    """要存进历史的 assistant 消息：role、content、原样的 tool_calls，加上 Provider 要的字段。"""
    # null 与 "" 都合乎 OpenAI 协议，但 Ollama、旧版 LM Studio 拒收 null，llama-cpp-python 回 500
    saved = {"role": "assistant", "content": message.content or ""}
    if message.tool_calls:
        saved["tool_calls"] = [
            {
                "id": call.id,
                "type": call.type,
                "function": {"name": call.function.name, "arguments": call.function.arguments},
                **provider_owned(call, ECHOED_CALL_FIELDS),
            }
            for call in message.tool_calls
        ]
    return {**saved, **provider_owned(message, ECHOED_MESSAGE_FIELDS)}


def final_answer(message: object, tool_ran: bool) -> str:
    """stop 也可能不是回答：拒答、空回答（课文片段收下了空串）、写成文字的调用都停下。"""
    if message.refusal:
        raise AgentStop(MODEL, f"模型拒绝回答：{clip(message.refusal)}", HINT_POLICY)
    text = without_reasoning(message.content or "")
    if not any(char.isprintable() and not char.isspace() for char in text):  # 零宽字符也看不见
        raise AgentStop(MODEL, "模型返回了空回答", "再问一次；仍为空就换更大的模型")
    # 写成文字的订单（端点没把调用解析成 tool_calls，Harness 不执行它）：这一轮还没有工具运行过，
    # 它就是漏掉的调用；运行过之后，它多半在汇报那次调用（表格、JSON 总结），除非拿掉后什么都不剩。
    orders = written_orders(text)
    left = text
    for order in orders:
        left = left.replace(order, " ")
    if orders and (not tool_ran or not re.search(r"[^\W_]", left)):
        what = f"模型把调用写成了文字（或漏出了模板的控制标记），端点没解析出来：{clip(text, 120)}"
        raise AgentStop(PROVIDER, what, HINT_WRITTEN_CALL)
    return text


def run_agent(client: object, model: str, user_text: str, messages: list | None = None) -> str:
    """最多发 MAX_STEPS 次模型请求，返回最终回答；传入 messages 可在外面看到历史。
    与课文片段不同，响应要通过全部检查才写进历史（课文先写）：被拒收的响应不会混进会话。"""
    messages = [] if messages is None else messages
    messages.append({"role": "user", "content": user_text})
    for step in range(1, MAX_STEPS + 1):
        try:  # 连不上、HTTP 错误、响应体不合协议：第三部分的客户端在这里停下并点名
            response = client.chat.completions.create(model=model, messages=messages, tools=TOOLS)
            choice = response.choices[0]
            message = choice.message
            print(f"step {step}: finish_reason={clip(choice.finish_reason, 40)}")  # null 也看得见
            reply = assistant_message_from_api(message)
            if message.tool_calls:
                if choice.finish_reason not in ("tool_calls", "stop"):
                    raise unfinished(choice)
                ids = [call.id for call in message.tool_calls]
                if not all(ids) or len(set(ids)) < len(ids):  # 缺 id 或重复，结果就无法配对
                    raise AgentStop(PROVIDER, "Tool Call 缺少 id 或 id 重复", HINT_ENDPOINT)
                if len(ids) > MAX_TOOL_CALLS:
                    hint = f"上限是 {MAX_TOOL_CALLS}，一个都没执行；这个端点或模型的输出不正常"
                    raise AgentStop(HARNESS, f"一次要执行 {len(ids)} 个调用", hint)
                messages.append(reply)  # 先存 assistant：每条 Tool Result 都要回答历史里已有的调用
                for call in message.tool_calls:
                    result = execute_tool(call)
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
                    called = f"{clip(call.function.name, 60)} call_id={clip(call.id, 80)}"
                    print(f"step {step}: {called} result={result}")
                continue
            if choice.finish_reason == "stop":
                answer = final_answer(message, tool_ran=messages[-1]["role"] == "tool")
                messages.append(reply)
                return answer
            raise unfinished(choice)
        except AgentStop as stop:  # 唯一记账的一处：停在第几步
            stop.step = step
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
        self.requests.append(json.loads(json.dumps(request, allow_nan=False)))  # 发得出去的才存
        expect(self.responses, f"预设的响应用完了：Loop 发出了第 {len(self.requests)} 次请求")
        return read_reply(json.dumps(self.responses.pop(0)).encode())


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
    table = "| multiply | a=248, b=15 | 3720 |"  # 工具运行过之后，同样的写法多半是在汇报
    outcome, _, _, _ = run_fake(fake_turn("call_1"), fake_response("stop", table))
    expect(outcome == table, f"工具运行过之后，汇报调用的表格应是回答：{outcome!r}")


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
    (
        "Tool Call + stop 照常执行；截断、过滤、缺 id、空回答、没运行工具就写成文字的调用：都停下",
        check_stops,
    ),
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


# ======================== 第三部分：附录——真实世界 ========================
# 按一次运行碰到外部世界的顺序排，每节一套机制。规则的含义都在第一部分；这里只把外面的字节变成
# 第一部分读的对象、格式化文字、诊断失败。

# ---- 配置进来：环境只由 main 读一次；只有确定的错才在发请求之前拦下（退出码 2） ----
VARIABLES = ("OPENAI_API_KEY", "OPENAI_MODEL", "OPENAI_BASE_URL", "OPENAI_TIMEOUT")
CERTIFICATES = ("SSL_CERT_FILE", "SSL_CERT_DIR")  # SDK 的 HTTP 库照它们找根证书
# 旧教程（openai 0.x 的 OPENAI_API_BASE）或别的工具用的名字：脚本不读它们
OLD_NAMES = {
    "OPENAI_API_BASE": "OPENAI_BASE_URL",
    "OPENAI_BASE": "OPENAI_BASE_URL",
    "OPENAI_API_BASE_URL": "OPENAI_BASE_URL",
    "OPENAI_KEY": "OPENAI_API_KEY",
    "OPENAI_MODEL_NAME": "OPENAI_MODEL",
}


class ConfigError(AgentStop):  # 配置里确定的错（Harness 这一环），还没发出任何请求
    exit_code = EXIT_USAGE


def check_config(environment):
    """在发出任何请求之前，只拦下确定的错；返回之后用到的全部值。"""
    for old, name in OLD_NAMES.items():
        if environment.get(old) and not environment.get(name):  # 设成空串的不算
            what = f"没设 {name}，却设着 {old}（旧教程或别的工具用的名字，脚本不读它）"
            raise ConfigError(HARNESS, what, f'改用 {name}：export {name}="${old}"，或 unset {old}')
    values = {name: environment.get(name, "").strip() for name in VARIABLES + CERTIFICATES}
    for name, value in values.items():
        problem = variable_problem(name, value)
        if problem:  # key 的值不打印；别的值里像 key 的段、地址里的密码，遮罩会换掉
            raise ConfigError(HARNESS, f"{name} 不可用：{problem[0]}", problem[1])
    # 默认端点写明，SDK 就不再读环境；SDK 默认等 10 分钟，学习时太久
    values["OPENAI_BASE_URL"] = values["OPENAI_BASE_URL"] or "https://api.openai.com/v1"
    values["OPENAI_TIMEOUT"] = float(values["OPENAI_TIMEOUT"] or 60)
    return values


def variable_problem(name, value):
    """一个变量犯了哪种确定的错：(错在哪, 怎么改)；没有错是 ()。从上往下，先说最具体的。"""
    if name in CERTIFICATES and value and not os.path.exists(value):  # 多半是卸掉的 conda 留下的
        return "指向的路径不存在", f"改成存在的证书，或 unset {name}"
    if not value and name in VARIABLES[:2]:
        return "没设这个环境变量", f"export {name}=...（照 README 填；本地服务的 key 填 local）"
    if not value or name in CERTIFICATES:
        return ()
    if re.fullmatch(r"[\"'“‘].*[\"'”’]", value, re.S):  # 两边的引号
        return "两边带着引号（多半是从 .env 文件连引号一起复制的）", "去掉引号"
    # 没展开的 $NAME、${NAME}、%NAME%（不是 %E6% 这样的转义），待填的 {NAME}、<网关>、sk-...、your-
    if re.search(
        r"\$\{?[A-Za-z_]|\{[A-Za-z_]\w*\}|%[A-Za-z_]\w{2,}%|<[^<>]*>|\.\.\.|…|\byour[-_]", value
    ):
        return "里面还有占位符或没展开的变量", "换成你自己的真实值（单引号里的 $NAME 不会展开）"
    if value.startswith("Bearer "):
        return "开头多了 Bearer（SDK 会自己加）", "只留 key"
    # key 在 HTTP 头里、地址在网址里：只能是看得见的 ASCII；模型名可以有中文，不能有空白、看不见的字
    ascii_only = name != "OPENAI_MODEL"
    bad = [c for c in value if c == " " or not c.isprintable() or (ascii_only and not c.isascii())]
    if bad:
        half = unicodedata.normalize("NFKC", bad[0])  # 全角的「：」是半角的「:」
        fix = f"换成半角的「{half}」" if half != bad[0] and half.isprintable() else ""
        return f"第 {value.index(bad[0]) + 1} 个字符 {bad[0]!r} 不能用", fix or "删掉它"
    if name == "OPENAI_BASE_URL":
        try:
            url = urlsplit(value)
            ok = url.scheme in ("http", "https") and url.hostname and url.port != 0
        except ValueError:  # 端口不是 0–65535 的数（localhost:port 这样的占位符）、[IPv6 没写完
            ok = False
        if not ok:
            return "要写成 http(s)://主机[:端口]/路径", "照 Provider 的文档写"
        if url.path.rstrip("/").endswith("/chat/completions"):
            return "写到了 /chat/completions", "写到它之前为止：SDK 自己会加"
    # 秒数：不到 1 万，也不是 0（0 秒里什么都答不了）
    if name == "OPENAI_TIMEOUT" and not (re.fullmatch(r"\d{1,4}(\.\d+)?", value) and float(value)):
        return "要是秒数", "例如 export OPENAI_TIMEOUT=60"
    return ()


# ---- 请求失败：一次请求只发一次；按 SDK 的异常类型分类，先引用 Provider 的原话 ----
HINT_KEY = "检查 OPENAI_API_KEY：是否完整、没过期，是否属于 OPENAI_BASE_URL 那家 Provider（和地区）"
HINT_BALANCE = "余额、额度或免费额度用完了，或账户欠费：到 Provider 控制台充值或开通付费，或换 key"
HINT_RATE = "触发了频率、并发或每分钟的限额：稍等再试（本课不重试）；一直如此就查控制台的限额"
HINT_WORDS = "按上面 Provider 的原话处理"
HINT_UPSTREAM = (
    "网关或服务答了，它后面的模型服务没答上：稍后再试；经网关就问它的管理员；本机端点设 NO_PROXY"
)
# Provider 的原话说的是哪件事，建议就给那件事的：不看是谁说的，也不看状态码（余额用完，有的回 400，
# 有的回 403、429）。从上往下找第一个说中的，具体的在前：Gemini 每分钟的限额也提到 quota，先认频率。
# fmt: off
CONCEPTS = [  # (这件事的中英文说法, 失败的一环, 建议)
    (r"support.{0,12}(tools?|tool use|function call)|tools?.{0,12}not supported|tools? param"
     r"|tool choice",  # 不支持 tools
     MODEL, "换支持 tools 的模型或端点（vLLM 开自动工具选择，llama.cpp 别加 --no-jinja）"),
    (r"enable.?thinking|stream mode|stream=false|non.?stream|流式|思考",
     PROVIDER, "这个模型开着思考、只收流式请求：本课只发普通请求，换不开思考也能调用工具的模型"),
    (r"rate.?limit|too many requests|per.?minute|concurren|\brpm\b|\btpm\b|request limit"
     r"|retry in|频率|速率|并发|访问量过大|限流", PROVIDER, HINT_RATE),
    (r"insufficient|balance|quota|billing|arrearage|overdue|good standing|free tier|paid"
     r"|余额|欠费|额度|充值|资源包", PROVIDER, HINT_BALANCE),
    (r"context(?! deadline)|token.?limit|(input|prompt).{0,20}(too long|length)"
     r"|上下文|超长|过长|长度超", MODEL, "超出了模型的上下文长度：问短一点，或换上下文更大的模型"),
    (r"country|region|territory|location is not supported|地区|地域", PROVIDER,
     "这个地区用不了它：换本地区能用的 Provider，或用它在本地区的站点（key 按站点分开）"),
    (r"model\b.{0,60}(not exist|not found)|not found the model|not activated the model"
     r"|invalid model|endpoint that does not exist|not supported for format|无可用渠道"
     r"|模型不存在|无权(使用|访问)模型", PROVIDER,
     "检查 OPENAI_MODEL：与 Provider 模型列表一字不差、账户已开通；经网关时令牌要有权用它"),
    (r"api.{0,3}key|\btoken(?!s)|auth|credential|unauthorized|no connected db|令牌|密钥", PROVIDER,
     HINT_KEY),
    (r"upstream connect|connection error|no fallback|do request failed|deadline exceeded|上游",
     PROVIDER, HINT_UPSTREAM),
]
STATUS_HINTS = {  # 各家含义一致的状态码
    401: HINT_KEY,
    404: "检查 OPENAI_BASE_URL 的路径（多以 /v1 结尾；智谱 /api/paas/v4，火山方舟 /api/v3）",
    429: HINT_RATE,
    502: HINT_UPSTREAM,  # 502、503：网关（或代理）后面的服务没答上
    503: HINT_UPSTREAM,
}
# fmt: on
# 错误体里给人看的那句话，不论信封：error.message、msg、error_msg、status_msg、detail、raw……
WORDS = r'"(?:message|msg|error_msg|status_msg|detail|error|raw)"\s*:\s*"((?:[^"\\]|\\.)*)"'


class RequestFailed(AgentStop):  # 没拿到能读的回复：请求失败，或 HTTP 2xx 的响应体不是回复
    exit_code = EXIT_REQUEST_FAILED


def make_client(config):
    """形状同 SDK 客户端（.chat.completions.create）；一个请求只发一次，代理、证书由 SDK 决定。"""
    try:
        import openai
        from openai import OpenAI  # noqa: F401  脚本旁边同名的 openai.py 里没有它
    except ImportError as error:
        hint = "激活 README 建的 .venv，或 pip install -r requirements.txt；自己的 openai.py 要改名"
        raise ConfigError(HARNESS, f"openai SDK 导入失败：{clip(str(error))}", hint) from None
    seconds = config["OPENAI_TIMEOUT"]
    try:  # HTTP 库在这一刻读代理、证书的变量：它们有错，就错在这里
        client = openai.OpenAI(
            api_key=config["OPENAI_API_KEY"],
            base_url=config["OPENAI_BASE_URL"],
            timeout=openai.Timeout(seconds, connect=min(seconds, 5.0)),  # 连接最多等 5 秒
            max_retries=0,  # 本课不重试：一个请求只发一次
        )
    except Exception as error:
        what = f"SDK 没能用这台机器的设置创建客户端（{type(error).__name__}: {clip(str(error))}）"
        hint = "检查代理的变量（HTTPS_PROXY、ALL_PROXY；socks5:// 要装 socksio）和 SSL_CERT_FILE"
        raise ConfigError(HARNESS, what, hint) from None

    def create(**request):
        try:  # 响应体由 SDK 在它的 try 里读完：读到一半断了、超时，也是它的异常
            raw = client.chat.completions.with_raw_response.create(**request).http_response
        except openai.APIStatusError as error:
            status = error.status_code
            raise provider_failure(f"HTTP {status}：", status, error.response.text) from None
        except openai.APIConnectionError as error:  # 连不上、超时：HTTP 库的异常说断在哪一步
            raise network_failure(error.__cause__ or error, config) from None
        return read_reply(raw.content, raw.status_code)  # 要的是响应体的字节

    return SimpleNamespace(chat=SimpleNamespace(completions=SimpleNamespace(create=create)))


def network_failure(cause, config):
    """断在哪一跳（代理、TLS、远端、本机服务）和怎么修：看 HTTP 库的异常类型和它正在连的地址，
    不是端点就是代理（走不走代理由它按环境变量定，不重推；代理答了 407、502，地址取它读的那处）。"""
    url = urlsplit(config["OPENAI_BASE_URL"])
    endpoint = f"{url.hostname}:{url.port or (443 if url.scheme == 'https' else 80)}"
    kinds, address = what_failed(cause)
    if "ProxyError" in kinds or address not in ("", endpoint):  # 代理没在运行、端口不对、不肯转发
        import urllib.request  # 只在这里用：自检、演示不必导入它

        proxies = urllib.request.getproxies()
        what = f"代理 {address or proxies.get(url.scheme) or proxies.get('all')} 没接通"
        hint = (
            "打开代理软件（Clash、V2Ray），核对端口（Clash Verge 默认 7897，老版本 7890）；407 要"
            "把用户名密码写进代理地址，502 就换节点；本机端点别经代理：NO_PROXY=127.0.0.1"
        )
    elif "SSLCertVerificationError" in kinds:
        what = f"{endpoint} 的 TLS 证书不受信任"
        hint = "公司网络或代理软件在检查 TLS：把它的根证书写进 SSL_CERT_FILE，或换个网络"
    elif "SSLError" in kinds:  # 最常见的是对方说的不是 TLS：端点或代理的 http 端口写成了 https://
        what = "TLS 握手失败"
        hint = "OPENAI_BASE_URL 或代理的地址把 http:// 写成了 https://（本机服务、Clash 都是 http）"
    elif "SSL" in str(kinds):  # 别的 TLS 错（SSLEOFError 等）：握手到一半连接被关掉
        what = f"和 {endpoint} 的 TLS 握手被断开"
        hint = "经代理的，多半是代理的节点不通：换个节点；没经代理的，国外的端点在国内常要经代理"
    elif "ReadTimeout" in kinds:
        what = f"连上了，{config['OPENAI_TIMEOUT']:g} 秒（OPENAI_TIMEOUT）内没等到响应"
        hint = "模型慢（本机小模型、推理模型）就调大 OPENAI_TIMEOUT"
    elif "ConnectTimeout" in kinds:  # 连接最多等 5 秒（make_client）
        what = f"{min(config['OPENAI_TIMEOUT'], 5):g} 秒内没连上 {endpoint}"
        hint = "对方不应答连接：检查网络；国外的端点在国内常要经代理：HTTPS_PROXY=http://127.0.0.1:7897"
    elif "ConnectError" in kinds and url.hostname in ("localhost", "127.0.0.1", "0.0.0.0"):
        what = f"本机 {endpoint} 上没有服务在应答"
        hint = "先启动服务（llama-server、Ollama……）并核对端口；本机服务多用 http://"
    elif "ConnectError" in kinds:
        what = f"连不上 {endpoint}"
        hint = "国外端点在国内要经代理：HTTPS_PROXY=http://127.0.0.1:7897（设了就看代理开没开）"
    else:  # 连上了，响应却没能读完：对方中途断开、协议出错、编码（gzip 等）和它说的不符
        what = f"连上了 {endpoint}，响应没能读完"
        hint = "对方中途断开，或响应的编码不对：看服务端日志，和中间的代理、网关"
    return RequestFailed(SDK_NETWORK, f"{what}（{kinds[0]}: {clip(str(cause), 120)}）", hint)


def what_failed(error):
    """HTTP 库的异常一层包一层（__context__）：每层的类型名，和它失败时正在连的“主机:端口”（它
    traceback 里 connect_tcp 的参数；没在连是空串）。"""
    kinds = []
    address = ""
    while error:
        kinds.append(type(error).__name__)
        for frame, _ in traceback.walk_tb(error.__traceback__):
            if frame.f_code.co_name == "connect_tcp":
                address = f"{frame.f_locals.get('host')}:{frame.f_locals.get('port')}"
        error = error.__context__
    return kinds, address


def provider_words(text):
    """Provider 的原话：JSON 错误体里给人看的话，不论信封；没有就是空串（报告引用响应体本身）。"""
    said = []
    for literal in re.findall(WORDS, text):  # 只用正则读：不管它嵌套多深
        with contextlib.suppress(ValueError):
            literal = json.loads(f'"{literal}"')
        # 字符串本身又是一个 JSON 错误体（网关转述上游）：读出里面的原话
        said.append(provider_words(literal) if literal[:1] in "{[" else literal)
    return "：".join(dict.fromkeys(filter(str.strip, said)))


def provider_failure(what, status, text):
    """引用原话（没有就引用响应体）；建议先看原话说的是哪件事，再看状态码，最后请你照原话办。"""
    words = provider_words(text)
    quoted = f"{what}{clip(words or text) or '（响应体是空的）'}"
    for pattern, link, hint in CONCEPTS:
        if re.search(pattern, words, re.IGNORECASE):
            return RequestFailed(link, quoted, hint)
    quiet = "没有原话：确认 OPENAI_BASE_URL 是 OpenAI 兼容的 API（不是网页），再看服务端日志"
    return RequestFailed(PROVIDER, quoted, STATUS_HINTS.get(status, HINT_WORDS if words else quiet))


# ---- 字节变成回复：2xx 的字节只在这里变成 Loop 读的对象；读不了、不合协议，是 Provider 的失败 ----
def read_reply(body, status=200):
    """字节 → JSON → Loop 读的对象，只在这里查一次：之后第一部分照课文的写法直接读字段。"""
    try:  # 不是 UTF-8、不是 JSON、缺了或类型不对的字段：都是 ValueError，说出是哪一处
        data = json.loads(body.decode("utf-8-sig"))  # JSON 的标准允许开头的 BOM
        # 要存进历史的下次照原样发回：SDK 发不出去的（NaN、孤立的代理字符）现在就说
        json.dumps(data, ensure_ascii=False, allow_nan=False).encode()
        reply = shaped(REPLY, data, "响应体")
        if not reply.choices:  # 没有回复，多半只有一个错误的信封：原话在里面
            raise ValueError("choices 是空的")
    except (ValueError, RecursionError) as error:  # 嵌套太深的，解析或引用时递归出错
        kind = type(error).__name__
        what = f"HTTP {status}，但响应体不是 OpenAI 协议的回复（{kind}: {clip(str(error), 80)}）："
        raise provider_failure(what, status, body.decode(errors="replace")) from None
    return reply


# Loop 读的那部分协议，写一次：JSON 对象都变成能按属性读的对象，别的字段留在外面。(类型, NONE)
# 是可以没有的字段（没有就是 None）；没写 NONE 的必须有；列表没有就是空的。object 是 Provider 的
# 不透明字段，原样留着；error 只许没有（OpenRouter 把生成中途的错误放在 choices[0].error）。
NONE = type(None)
CALL = {"id": (str, NONE), "type": "function", "function": {"name": str, "arguments": str}}
CALL |= dict.fromkeys(ECHOED_CALL_FIELDS, object)
MESSAGE = {"content": (str, NONE), "refusal": object, "tool_calls": [CALL]}
MESSAGE |= dict.fromkeys(ECHOED_MESSAGE_FIELDS, object)
REPLY = {"choices": [{"finish_reason": (str, NONE), "error": NONE, "message": MESSAGE}]}


def shaped(spec, value, where):
    """value 照 spec 的样子变成对象；缺了必须有的、类型不对，就说出是哪个字段。"""
    if isinstance(spec, dict) and isinstance(value, dict):
        fields = {key: shaped(kind, value.get(key), f"{where}.{key}") for key, kind in spec.items()}
        return SimpleNamespace(**fields)
    if isinstance(spec, list) and isinstance(value, (list, NONE)):
        return [shaped(spec[0], item, f"{where}[]") for item in value or []]
    if (isinstance(spec, (type, tuple)) and isinstance(value, spec)) or value == spec:
        return value  # spec 是一个值（"function"）时，只许正是这个值
    raise ValueError(f"{where} 不对：{clip(value, 60)}")


# ---- 回复是不是回答：推理块，写成文字的调用 ----
HINT_WRITTEN_CALL = (
    "让服务端把调用解析成 tool_calls：vLLM、SGLang 开 tool-call parser；llama.cpp 的模板要教对格式"
    "（Qwen2.5-Coder 用 templates/qwen2.5-coder-tools.jinja）；Ollama 选带 tools 标签的模型"
)


def without_reasoning(text):
    """去掉开头的推理块 <think>…</think>：可以连着几块，也可以只剩 …</think>；没写完就全是推理。"""
    rest = re.sub(r"^(?:(?:<think>)?(?:(?!<think>).)*?</think>\s*)+", "", text.lstrip(), flags=re.S)
    return "" if rest.startswith("<think>") else rest


# 服务端没把调用解析成 tool_calls 时（模板不对、parser 没开），调用落在 content 里。认它的规则
# 从 TOOLS 推出，不列各家的写法：回答里一段只由“订单的词”连成的文字，既有所给工具的名字、又给它的
# 一个参数赋了值，就是一张订单。订单的词是名字、赋值和下面这些；别的词、单独的数、句号让这段断开。
ORDER_GLUE = r"""(?:
    <[^<>\n]{0,80}>                # 标签、控制标记：<tool_call>、<function=multiply>、<|im_end|>
  | (?<=>)\s*[^<>\s]{1,40}\s*(?=<)  # 两个标签之间的一个词或值：<arg_key>a</arg_key>、>\n248\n<
  | \[[A-Z_]+\]\d*                 # Mistral 的记号：[TOOL_CALLS]、[ARGS]、[CALL_ID]123456789
  | "\w+"\s*:                      # JSON 的键："name":、"arguments":
  | ```\w*                         # 代码围栏：```json
  | :\d+\b                         # 调用的序号：functions.multiply:0
  | [^\w.。!?！？]                  # 别的标点和空白（句子的结尾不算：话说完了）
)"""
# 赋的值：数、字符串、true/false/null，或一个标签的开头（FunctionGemma 的 <escape>248）
VALUE = r"""(?:-?\d[\d.]*|"(?:[^"\\\n]|\\.)*"|'[^'\n]*'|true|false|null|<)"""
# 不看名字的两条：模板的控制标记 <|…|>、<｜…｜ 从来不是回答；回答一开头就是“名字 + 参数”的 JSON
CONTROL_TOKEN = r"<\|[^<>|\s]{1,40}\|>|<｜[^<>｜\n]{1,40}｜"
CALL_HEAD = (
    r'\s*(?:```\w*)?[\s\[{]*\{\s*"(?:name|tool_name|function)"\s*:\s*"[^"\n]*"\s*,\s*'
    r'"(?:arguments|parameters|args)"\s*:(?!\s*\{\s*"type"\s*:\s*"object")'  # 参数不是 Schema
)


def written_orders(text):
    """回答里写成文字的订单（和漏出的控制标记），每段一项，是原文；从不解析、执行它们。"""
    said = re.sub(r"(`+)(?!`).+?(?<!`)\1(?!`)", " ", text)  # 行内代码是引用，不是订单
    found = re.findall(CONTROL_TOKEN, said) + re.findall(f"^{CALL_HEAD}", said)
    for tool in TOOLS:
        name = rf"(?<![\w-]){re.escape(tool['function']['name'])}(?![\w-])"  # 名字是一整个词
        p = "|".join(map(re.escape, tool["function"]["parameters"]["properties"]))
        assigned = rf"""["'\\]*\b(?:{p})\b["'\\]*\s*[:=]\s*{VALUE}"""  # a=248、"a": 248、a: 248
        value = (
            rf"""{assigned}|<[^<>]*=["']?(?:{p})\b[^<>]*>|>(?:{p})</"""  # 或 <parameter=a>、>a</
        )
        stretches = re.findall(rf"(?:{value}|{name}|{ORDER_GLUE})+", said, re.X)
        found += [s.strip() for s in stretches if re.search(name, s) and re.search(value, s)]
    longest = [
        order for order in found if not any(order != other and order in other for other in found)
    ]
    return list(dict.fromkeys(longest))  # 被更长的一段包住的（开头的 JSON、控制标记）不单算


# ---- 文字出去：只显示课文讲到的字段；秘密只经过一道遮罩；每个字都经过同一个出口 ----
# 课文讲到的消息字段：一份允许名单
SHOWN = {"role", "content", "tool_calls", "tool_call_id", "id", "type",
         "function", "name", "arguments"}  # fmt: skip
# 像 key 的一段：sk-…、gsk_…、xai-…、AIza…、JWT、32 位以上的字母数字（智谱）、UUID（火山方舟）
KEY_LIKE = (
    r"\b(?:sk|gsk|xai)[-_][\w-]{8,}|\bAIza[\w-]{20,}|\beyJ[\w-]{10,}\.[\w.-]+"
    r"|[A-Za-z0-9]{32,}|\b[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}\b"
)
# 终端控制字符和改变文字方向的字符：模型、Provider 写来的字不能操纵终端
TERMINAL_UNSAFE = (
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]|\r(?!\n)"
)


def for_display(value):
    """课文讲到的字段照常显示，别的（推理、签名、用量……）写成“（已省略）”，不论它叫什么。"""
    if isinstance(value, dict):
        return {k: for_display(v) if k in SHOWN else "（已省略）" for k, v in value.items()}
    if isinstance(value, list):
        return [for_display(item) for item in value]
    return value


def secret_mask(environment):
    """唯一的遮罩：key 和环境里像 key 的段，原样、JSON 转义（含 \\/）、%-转义三种写法，从前 8 个字符
    起整段换成 ***；地址里的用户名密码换成 ***；终端控制字符写成 \\u 转义。"""
    forms = set()
    # 整个环境都看：SDK 和 HTTP 库也读别的变量（OPENAI_ORG_ID、代理地址），报错会引用它们；
    # 多遮一段像 key 的 UUID，好过漏一个秘密
    for secret in {environment.get("OPENAI_API_KEY", ""), *re.findall(KEY_LIKE, str(environment))}:
        # JSON 转义：key 里只有 / 会变（PHP 写成 \/）；%-转义：写进网址的
        forms |= {secret, secret.replace("/", "\\/"), quote(secret, "", None, "replace")}
    starts = "|".join(re.escape(form[:8]) for form in forms if len(form) >= 8)
    secret = re.compile(rf"(?:{starts})[\w\-./+=%\\]*" if starts else "(?!)", re.IGNORECASE)

    def mask(text):
        text = secret.sub("***", text)
        text = re.sub(r"\b([A-Za-z][\w+.-]*://)[^\s/]+@", r"\1***@", text)  # 密码里也可能有 @
        return re.sub(TERMINAL_UNSAFE, lambda match: f"\\u{ord(match[0]):04x}", text)

    return mask


class MaskedOutput(io.TextIOBase):
    """包住 stdout/stderr：每个字先过遮罩再写，写完就冲刷（2>&1 时先后才对）。写不出去（管道已关、
    磁盘满）就接到空设备，不再出错：退出码仍是这次运行自己的。"""

    def __init__(self, stream, mask):
        self.stream = stream
        self.mask = mask

    def write(self, text):
        try:
            self.stream.write(self.mask(text))
            self.stream.flush()
        except (OSError, ValueError):  # 管道已关、磁盘已满：剩下的字（和退出时的冲刷）进空设备
            with contextlib.suppress(OSError, ValueError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), self.stream.fileno())
        return len(text)


# ---- 命令行：解析参数、运行，把停下变成两行说明；异常的类决定退出码，别的异常是 bug ----
HELP = """\
用法：python3 lesson_03_tool_calling_loop.py [--show-messages] [问题……] | --self-check | --demo
  问题默认“帮我算一下 248 乘以 15”；--show-messages 在结束后（失败时也一样）把消息历史打印成 JSON
  在线运行读 OPENAI_API_KEY、OPENAI_MODEL、OPENAI_BASE_URL、OPENAI_TIMEOUT（怎么填见 README）
退出码：0 有回答（不保证对）；1 Loop 被停下或程序出错；2 用法或配置错误；3 请求失败；130 Ctrl-C"""
OPTIONS = ("--self-check", "--demo", "--show-messages", "--help", "-h")


def run_command(argv, environment):
    """解析参数（像 -x、--word 的才是选项，"-7 乘以 6" 仍是问题），然后自检、演示或在线跑一轮。"""
    # 中文输入法把 -- 打成 ——、－－：这样的词也是选项，只是写错了
    options = [arg for arg in argv if re.fullmatch(r"(--?|[—－–]+)[A-Za-z][\w-]*(=.*)?", arg)]
    question = " ".join(arg for arg in argv if arg not in options).strip() or DEFAULT_QUESTION
    if "-h" in options or "--help" in options:
        print(HELP)
        return EXIT_OK
    for option in set(options) - set(OPTIONS):
        meant = "--" + option.lstrip("—－–")
        problem = f"{option}（横线是全角的，应为 {meant}）" if meant in OPTIONS else option
        print(f"参数错误：不认识的选项 {problem}\n{HELP.splitlines()[0]}", file=sys.stderr)
        return EXIT_USAGE
    if "--self-check" in options:
        return self_check()
    if "--demo" in options:
        return demo()
    messages = []  # 在线跑一轮：打印回答，或两行报告
    config = {}
    try:
        config = check_config(environment)
        answer = run_agent(make_client(config), config["OPENAI_MODEL"], question, messages)
        print("Agent> " + answer)
    except AgentStop as stop:
        report(stop, config, messages)
        return stop.exit_code
    finally:  # 失败了、按了 Ctrl-C、程序出错也打印：看得到停在了哪里
        if "--show-messages" in options and messages:
            print(json.dumps(for_display(messages), ensure_ascii=False, indent=2))
    orders = written_orders(answer)  # 只在工具运行过之后才会留下（第一部分 final_answer）
    if orders:  # 可能是半个回答：执行过的只有上面 step 行里的调用
        note = (
            f"回答里写成文字的调用（或模板标记）没有执行，执行过的见 step 行：{' / '.join(orders)}"
        )
        print(clip(note), file=sys.stderr)
    return EXIT_OK


def report(stop, config, messages, file=None):
    """两行：哪一环、第几步、原因（端点的问题写明端点和模型）；最后一个成功事件和建议。"""
    target = f"；端点 {config['OPENAI_BASE_URL']}，模型 {config['OPENAI_MODEL']}" if config else ""
    where = f"step {stop.step}: " if stop.step else ""
    last = f"最后一个成功事件：{last_success(stop, messages)}；" if messages else ""
    text = f"[{stop.link}] {where}{stop.reason}{target}\n{last}建议：{stop.hint}"
    print(text, file=file or sys.stderr)


def last_success(stop, messages):
    """最后一个成功事件：读到了那一步的响应（Loop 因为它停下），或历史里最后写入的那条。"""
    if stop.step and not isinstance(stop, RequestFailed):  # 响应读到了，是它不可信
        return f"step {stop.step}: 收到响应"
    if messages[-1]["role"] == "tool":
        return f"{clip(messages[-1]['tool_call_id'])} 的 Tool Result 已写入历史"
    return "Harness 已就绪，user 消息已写入历史"


def main(argv, environment):
    """命令行入口，返回退出码。环境只在这里读一次；所有输出都经过同一道遮罩。"""
    mask = secret_mask(environment)
    with contextlib.suppress(AttributeError):  # 终端编码写不出的字写成 \u 转义，不让输出断掉
        sys.stdout.reconfigure(errors="backslashreplace")
    out = MaskedOutput(sys.stdout, mask)
    err = MaskedOutput(sys.stderr, mask)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            return run_command(argv, environment)
        except KeyboardInterrupt:  # 无论正在做什么、写什么（包括 | less 里的历史），都只是一行
            print("已中断（Ctrl-C）", file=err)
            return 130
        except Exception:  # 不是外部世界的失败，是 Harness 自己（或改过的代码）的 bug：原样可见
            print(
                "[Harness] 程序自身出错了（不是 Provider 或网络的错，先查改过的代码）：", file=err
            )
            traceback.print_exc()
            return EXIT_STOPPED


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], os.environ))
