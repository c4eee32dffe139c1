# /// script
# requires-python = ">=3.9"
# dependencies = ["openai>=1.109.1,<4"]
# ///
"""第 3 课：跑通第一个 OpenAI-compatible Tool Calling Agent Loop（课文的可执行版本）。

课文例子里的一次 Turn（从提问到最终回答）有四条消息，多几次调用就多几条：
user -> assistant(tool_calls) -> tool(tool_call_id, result) -> assistant(final)

第一部分是课文（§1–§7，编号与课文相同），第二部分是自检和 --demo（没有 API Key 也能看 Loop
真跑一遍），第三部分收着真实世界需要、却不是本课主题的防护。读到第三部分之前，整课就已读完。
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import signal
import sys
from types import SimpleNamespace

EXIT_OK, EXIT_STOPPED, EXIT_USAGE, EXIT_REQUEST_FAILED, EXIT_OUTPUT_FAILED = 0, 1, 2, 3, 4


# ======================== 第一部分：课文 ========================

# ---- §1 模型只申请调用，Python 才执行工具 ----
# 名词只在这里定义一次。Model：生成文字和调用请求的模型。Provider：把模型放在 HTTP 接口后面的
# 服务（OpenAI、DeepSeek、本机的 llama-server……）。SDK：替我们发 HTTP 请求的 openai 包。
# Harness：这个文件，负责发请求、查响应、执行工具、决定何时停。Final：不再调用工具的最终回答。
#
# 模型从不亲手计算。它在回复里下一张“工具订单”，例如（arguments 是 JSON 字符串，不是对象）：
#   {"id": "call_1", "type": "function",
#    "function": {"name": "multiply", "arguments": "{\"a\":248,\"b\":15}"}}
# Python 校验后执行 multiply，把结果 3720 交还给模型，模型下一次才写出最终回答。
# 这是普通的 Tool Calling Loop，不是在复现 ReAct：后者还要求推理轨迹与动作交错生成。
DEFAULT_QUESTION = "帮我算一下 248 乘以 15"


# ---- §2 不要让模型控制 eval() ----
# 模型写出的字符串受用户输入和它读到的内容摆布。eval() 会把字符串当成 Python 代码运行：一句
# __import__("os").system(...) 就能读文件、导入模块、启动进程。所以工具只收两个整数这样的数据，
# 要做的运算由 Python 写死；模型把这样一句代码当参数送来，它也只是一个字符串（--demo 场景 2）。
MAX_ABS_VALUE = 1_000_000


def multiply(a: int, b: int) -> int:
    """两个整数相乘；拒绝 bool、小数、字符串和超出范围的值。"""
    for name, value in (("a", a), ("b", b)):
        # bool 是 int 的子类（isinstance(True, int) 为真）：不先排除，True 会被悄悄当成 1
        if isinstance(value, bool) or not isinstance(value, int):
            received = clip(json.dumps(value, ensure_ascii=False, default=repr), 60)
            raise ValueError(f"{name} 必须是整数，收到的是{json_type_name(value)} {received}")
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
MAX_ARGUMENTS_CHARS = 1_000  # 合法参数不到 40 个字符；上限挡住超长数字与深嵌套


def reject_duplicate_keys(pairs: list) -> dict:
    """json.loads 默认留下最后一个重复键；{"a":1,"a":248} 有歧义，直接拒绝。"""
    keys = [key for key, _ in pairs]
    repeated = sorted({key for key in keys if keys.count(key) > 1})
    if repeated:
        raise ValueError(f"工具参数有重复的键：{clip(repeated, 80)}")
    return dict(pairs)


def parse_arguments(arguments: object) -> dict:
    """把 arguments 字符串解析成 JSON 对象；不替模型转换类型，也不猜重复键的意思。"""
    if not isinstance(arguments, str):
        raise ValueError(f"工具参数必须是 JSON 字符串，收到的是{json_type_name(arguments)}")
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
    """Router：校验一个 Tool Call 并执行 multiply，返回紧凑 JSON，从不抛异常。参数填错只是这一单
    错了：{"status":"error"} 作为 Tool Result 交回模型，让它改正后再来。"""
    try:
        function = getattr(tool_call, "function", None)
        name = getattr(function, "name", None)
        if name != "multiply":
            raise ValueError(f"未知工具：{clip(name, 60)}")
        arguments = parse_arguments(getattr(function, "arguments", None))
        if set(arguments) != {"a", "b"}:
            raise ValueError(f"multiply 只接受 a 和 b，收到的键：{clip(sorted(arguments), 80)}")
        payload = {"status": "completed", "result": multiply(arguments["a"], arguments["b"])}
    except (ValueError, RecursionError) as error:
        payload = {"status": "error", "message": str(error)}
    # 紧凑写法：课文的步骤行打印的就是它，不带空格
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"))


# ---- §4 有限步 Agent Loop ----
# MAX_STEPS 限的是每轮 Turn 发给模型的请求次数（不是消息条数），保证花费和时间有个尽头；
# 至于模型为什么停不下来（反复调用、工具总报错、提示里没写何时收手），它不管，要另外查。
# 第 MAX_STEPS 次请求若仍要调用工具：工具照常执行、结果写进本地历史，但不会再有请求把它带给模型。
MAX_STEPS = 8
MAX_TOOL_CALLS = 32  # 失常的响应不该触发无界的工作；真实 Provider 的并行调用远少于此
# 停下时报告点名的四环。§6 的调用链还有 Router 与 Tool：它们的错误不停 Loop，交回模型
HARNESS, SDK_NETWORK, PROVIDER, MODEL = "Harness", "SDK/网络", "Provider", "Model"


class AgentStop(Exception):
    """Loop 停下的唯一方式：请求失败、配置有错、到了上限，或协议状态不可信（缺 id、调用被截断）。
    参数填错是数据，交回模型。带着失败的一环、原因和建议；步数与最后的成功事件由 Trail 补上。"""

    def __init__(self, link: str, reason: str, hint: str, exit_code: int = EXIT_STOPPED):
        super().__init__(reason)
        self.link, self.reason, self.hint, self.exit_code = link, reason, hint, exit_code
        self.step, self.last_ok, self.refused = None, "", None


class Trail:
    """只为失败报告记账：第几步、最后一个成功事件、还没写进历史的响应；AgentStop 带走这三样。"""

    step, last_ok, pending = 0, "Harness 已就绪，user 消息已写入历史", None

    def __enter__(self) -> Trail:
        return self

    def __exit__(self, kind: object, stop: object, traceback: object) -> None:
        if isinstance(stop, AgentStop):
            stop.step, stop.last_ok, stop.refused = self.step, self.last_ok, self.pending


# finish_reason 说的是 Provider 为什么停止生成。一个 Tool Call 只有在生成自然结束时才可信：
# tool_calls（停下来等工具结果），或 stop（OpenAI 在 tool_choice 指定函数时就这样回，Gemini、
# SGLang 也常见）。被截断或过滤的生成（length、content_filter，以及任何未知的值）里，arguments
# 可能只写了一半：一个都不执行，也不当成 Final。finish_reason 的规则与课文片段只差在 stop：课文要求
# 调用配 tool_calls；这里 stop 也照常执行，因为它同样是自然结束，调用照样要过 id 和 Router 的检查。
HINT_ENDPOINT = "这个端点的响应与 OpenAI 协议不一致，Harness 不会替它猜；换模型或端点再试"
HINT_LENGTH = (
    "输出上限或上下文窗口：调大 max_tokens（llama-server 的 -n/--n-predict，Ollama 的 "
    "num_predict），或换上下文更大的模型、缩短问题"
)
HINT_POLICY = "换一种问法，或查看 Provider 的内容策略"
FINISH_REASONS = {  # Loop 不接受的结束 -> (失败的一环, 含义, 建议)；不在表里的值一律当作未知
    "length": (MODEL, "输出达到 Token 上限被截断", HINT_LENGTH),
    "content_filter": (PROVIDER, "内容被 Provider 过滤", HINT_POLICY),
    "tool_calls": (PROVIDER, "消息里却没有任何 Tool Call", HINT_ENDPOINT),
    "function_call": (PROVIDER, "OpenAI 已弃用的旧 functions 协议", HINT_ENDPOINT),
    "sensitive": (PROVIDER, "内容被 Provider 的安全审核拦下（智谱）", HINT_POLICY),
    "network_error": (PROVIDER, "Provider 的推理服务出错（智谱）", "稍后再试；一直如此就换模型"),
}
HINT_MAX_STEPS = "模型一直在调用工具；检查问题、模型能力，以及工具错误是否反复出现"
HINT_TOO_MANY = f"上限是 {MAX_TOOL_CALLS}，一个都没执行；这个端点或模型的输出不正常，换一个再试"
HINT_EMPTY_ANSWER = "再问一次；仍为空就换更大的模型，或确认端点支持 Tool Calling"
HINT_CALL_AS_TEXT = (
    "让服务端把调用解析成 tool_calls：vLLM、SGLang 开 tool-call parser；llama.cpp 加 --jinja，"
    "模板要教对格式（Qwen2.5-Coder 用 templates/qwen2.5-coder-tools.jinja）；Ollama 选带 tools 的"
)


def unnatural_end(finish_reason: object, with_tool_calls: bool) -> AgentStop:
    """finish_reason 不是自然结束时的 AgentStop：说出它的含义；有调用时说明一个都没执行。"""
    unknown = (PROVIDER, "不是 OpenAI 协议中的值", HINT_ENDPOINT)
    link, meaning, hint = FINISH_REASONS.get(str(finish_reason), unknown)  # 值也可能是 [] 或 {}
    shown = clip(json.dumps(finish_reason, ensure_ascii=False, default=repr), 40)
    if with_tool_calls:
        what = f"有 Tool Call，但 finish_reason={shown}（{meaning}）：不可信，一个工具都没执行"
    else:
        what = f"模型没有正常结束：finish_reason={shown}（{meaning}），不能当成最终回答"
    return AgentStop(link, what, hint)


# 回传什么：课文的 role、content、tool_calls，外加 Provider 自己的不透明字段（推理、签名）。后者它
# 要原样收回才能接着这一轮，否则回 HTTP 400；别的私有字段它不认，带回去反而可能被拒。都不打印。
ECHOED_MESSAGE_FIELDS = ("reasoning_content", "reasoning_details")
ECHOED_CALL_FIELDS = ("extra_content",)


def provider_owned(source: object, names: tuple) -> dict:
    """source 上真的出现了的那几个字段（空字符串也算出现），值原样不动。"""
    return {n: getattr(source, n) for n in names if getattr(source, n, None) is not None}


def assistant_message_from_api(message: object) -> dict:
    """要存进历史的 assistant 消息：role、content、原样的 tool_calls，加上 Provider 要的字段。"""
    # null 与 "" 都合乎 OpenAI 协议，但 Ollama、旧版 LM Studio 拒收 null
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


def without_reasoning(text: str) -> str:
    """去掉开头的推理块 <think>…</think>（可以连着几块；模板把 <think> 写进提示时只剩 …</think>）。
    推理不是回答：原样留在历史里，但不打印。推理没写完（只有 <think>）就整段都是推理。"""
    rest = text.lstrip()
    while True:
        block, end, after = rest.partition("</think>")
        inside = block[len("<think>") :] if block.startswith("<think>") else block
        if not end or "<think>" in inside:  # 没有结束标签，或这一段不是一个推理块
            break
        rest = after.lstrip()
    return "" if rest.startswith("<think>") else rest


def final_answer(message: object) -> str:
    """finish_reason=stop 也可能不是回答：拒答、空回答、把工具调用写成了文字。返回要打印的回答。"""
    if getattr(message, "refusal", None):
        raise AgentStop(MODEL, f"模型拒绝回答：{clip(message.refusal)}", HINT_POLICY)
    text = without_reasoning(text_of(message.content))  # content 也可以是一串文本片段
    if not any(char.isprintable() and not char.isspace() for char in text):  # 零宽字符也看不见
        raise AgentStop(MODEL, "模型返回了空回答", HINT_EMPTY_ANSWER)
    # 整段就是一个调用：端点没把它解析成 tool_calls。只报告，从不从文字里解析、执行（那是替它猜）
    if looks_like_tool_call_text(text):
        what = f"模型把调用写成了文字，端点没有把它变成 tool_calls：{clip(text, 120)}"
        raise AgentStop(PROVIDER, what, HINT_CALL_AS_TEXT)
    return text


def run_agent(client: object, model: str, user_text: str, messages: list | None = None) -> str:
    """最多发 MAX_STEPS 次模型请求，返回最终回答；传入 messages 可在外面看到历史。
    与课文片段不同，响应要通过全部检查才写进历史（课文先写）：被拒收的响应不会混进会话。"""
    messages = [] if messages is None else messages
    messages.append({"role": "user", "content": user_text})
    with Trail() as trail:
        for step in range(1, MAX_STEPS + 1):
            trail.step = step
            # 连不上、超时、HTTP 错误：第三部分的 make_client 给的客户端把它们翻译成 AgentStop
            response = client.chat.completions.create(model=model, messages=messages, tools=TOOLS)
            trail.last_ok = f"step {step}: 收到响应"
            trail.pending = response  # 通过全部检查、写进历史之前，它都是“被拒收的那条响应”
            check_response_shape(response)  # 没有 choices[0]、字段不是能原样回传的文本：停下
            choice = response.choices[0]
            message = choice.message
            print(f"step {step}: finish_reason={shown_value(choice.finish_reason)}")
            reply = assistant_message_from_api(message)
            if message.tool_calls:
                if choice.finish_reason not in ("tool_calls", "stop"):
                    raise unnatural_end(choice.finish_reason, with_tool_calls=True)
                ids = [getattr(call, "id", None) for call in message.tool_calls]
                if not all(ids) or len(set(ids)) < len(ids):  # 缺 id 或重复，结果就无法配对
                    raise AgentStop(PROVIDER, "Tool Call 缺少 id 或 id 重复", HINT_ENDPOINT)
                if len(ids) > MAX_TOOL_CALLS:
                    raise AgentStop(HARNESS, f"一次要执行 {len(ids)} 个调用", HINT_TOO_MANY)
                messages.append(reply)  # 先存 assistant：每条 Tool Result 都要回答历史里已有的调用
                trail.pending = None  # 已写进历史：之后再失败，报告里就没有“被拒收的响应”
                for call in message.tool_calls:
                    result = execute_tool(call)
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
                    name = clip(call.function.name, 60)
                    shown_id = clip(call.id, 80)
                    print(f"step {step}: {name} call_id={shown_id} result={result}")
                    trail.last_ok = f"step {step}: {shown_id} 的 Tool Result 已写入历史"
                continue
            if choice.finish_reason == "stop":
                answer = final_answer(message)  # stop 也可能不是回答：拒答、空回答、写成文字的调用
                messages.append(reply)
                return answer
            raise unnatural_end(choice.finish_reason, with_tool_calls=False)  # length 不是 Final
        raise AgentStop(HARNESS, f"超过最大步骤数：{MAX_STEPS}", HINT_MAX_STEPS)


# ---- §5 tool_call_id 为什么不能丢 ----
# 一次回复可以同时要好几个调用，结果靠 tool_call_id 对上是哪一个，就像订单号。本课的历史只有
# 三种角色：user 提问，assistant 说话或下单，tool 带着 id 交回结果（system、developer 放开发者
# 指令，工具定义放在请求顶层的 tools 里）。Anthropic 的 tool_use/tool_result 内容块是另一套协议。


# ---- §6 运行与自检 ----
# --self-check 用假的响应只验证本地代码（Router、参数校验、id 配对、控制流），证明不了 key、端点、
# 模型对不对。在线运行必须设 OPENAI_API_KEY 和 OPENAI_MODEL；接第三方端点或本机服务再设
# OPENAI_BASE_URL（可选的变量见 README）。出错时沿调用链 Harness → SDK/网络 → Provider → Model →
# Assistant(tool_calls) → Router → Tool 找最后一个成功事件（last_ok）和失败的一环（link）：第一次
# 请求就收到“不支持 tools”，multiply 还没运行过，该查的是模型能力、模型名、接口路径和端点。


# ---- §7 下一课从哪里接上 ----
# messages 只活在进程内存里，进程一退出就没了（--demo 场景 4 用同一个列表接着问，一轮 Turn 变成
# 8 条消息的会话）。要恢复，先要 Session 或 Checkpoint：Session 存下这组消息，Checkpoint 记下运行
# 到哪一步、从哪里接着跑。只有工具会发邮件、付款、写文件，且崩溃后无法确认是否执行过时，才进一步
# 需要 Execution Ledger（记下有副作用的工具实际做过什么）、幂等（重试同一个请求不会重复产生副作用）
# 或人工核对。乘法没有副作用，用不着。


# ======================== 第二部分：自检与演示 ========================


def expect(condition: bool, what: str) -> None:
    """代替 assert 语句：python -O 会删掉 assert 语句，这个函数不会。"""
    if not condition:
        raise AssertionError(what)


def fake_call(call_id: object, arguments: str = '{"a":248,"b":15}', name: str = "multiply"):
    """形状同 SDK 的 ChatCompletionMessageToolCall：call.id / .type / .function.name。"""
    function = SimpleNamespace(name=name, arguments=arguments)
    return SimpleNamespace(id=call_id, type="function", function=function)


def fake_response(finish_reason: object, content: object = None, tool_calls: object = None):
    """形状同 SDK 的 ChatCompletion：response.choices[0].message / .finish_reason。"""
    message = SimpleNamespace(role="assistant", content=content, tool_calls=tool_calls)
    return SimpleNamespace(choices=[SimpleNamespace(message=message, finish_reason=finish_reason)])


def fake_turn(call_id: str, arguments: str = '{"a":248,"b":15}') -> object:
    """模型要调用一次 multiply 的响应。"""
    return fake_response("tool_calls", tool_calls=[fake_call(call_id, arguments)])


class FakeClient:
    """按顺序返回预设响应，并记下每次请求的 JSON 快照（SDK 也在调用时序列化）。"""

    def __init__(self, *responses: object):
        self.responses, self.requests = list(responses), []
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self.create))

    def create(self, **request: object) -> object:
        self.requests.append(json.loads(json.dumps(request)))
        expect(self.responses, f"预设的响应用完了：Loop 发出了第 {len(self.requests)} 次请求")
        return self.responses.pop(0)


def run_fake(*responses: object) -> tuple:
    """用假客户端跑一次 Loop，返回 (回答或 AgentStop, 客户端, 历史, 打印的行)。"""
    client, messages, printed = FakeClient(*responses), [], io.StringIO()
    with contextlib.redirect_stdout(printed):
        try:
            outcome = run_agent(client, "fake-model", DEFAULT_QUESTION, messages)
        except AgentStop as stop:
            outcome = stop
    return outcome, client, messages, printed.getvalue().splitlines()


ANSWER, RESULT_3720 = "248 乘以 15 等于 3720。", '{"status":"completed","result":3720}'
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
    ok = execute_tool(fake_call("call_1"))
    expect(ok == RESULT_3720, f"成功结果应是紧凑 JSON，实际 {ok}")
    bad = ['{"a":248,"b":15,"c":1}', '{"a":248}', '{"a":1,"a":248,"b":15}', '{"a":248,', "[1, 2]"]
    bad += ["", '{"a":"248","b":15}', '{"a":true,"b":15}', "[" * 100_000, CODE_AS_ARGUMENT]
    for arguments in bad:
        result = json.loads(execute_tool(fake_call("call_x", arguments)))
        expect(result["status"] == "error", f"{arguments[:30]} 应得到受控错误，实际 {result}")
    unknown = json.loads(execute_tool(fake_call("call_x", name="delete_files")))
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
        "choices 为空": SimpleNamespace(choices=[]),
        "空回答": fake_response("stop", content=" \u200b"),
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
    call = SimpleNamespace(**vars(fake_call("functions.multiply:0")), extra_content=signature)
    details = [{"type": "reasoning.encrypted", "data": "b3BhcXVl"}]
    private = dict(reasoning_content="先调用乘法工具", reasoning_details=details, reasoning="私有")
    first = fake_response("tool_calls", content="<think>先乘</think>", tool_calls=[call])
    first.choices[0].message.__dict__.update(private)
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
    """用与 SDK 响应同形的假对象逐项离线检查；失败时指出是哪一项，退出码 1。"""
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
    """没有 API Key 也能看 Loop 真跑：把与 SDK 同形的预设响应喂给真正的 run_agent。"""
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
        if number > 1:
            print()
        print(f"== 场景 {number}/{len(scenes)}：{title}")
        client, messages = FakeClient(*responses), []
        for question in questions:
            try:
                print("Agent> " + run_agent(client, "demo", question, messages))
            except AgentStop as stop:
                report(stop, {}, file=sys.stdout)
        if number == 1:  # 课文的一轮：四条消息
            print(json.dumps(messages, ensure_ascii=False, indent=2))
        if number == len(scenes):  # 同一个列表里的两轮 Turn，一条消息一行
            for message in messages:
                print(json.dumps(message, ensure_ascii=False))
            print(f"这 {len(messages)} 条消息只在内存里；下一课把它们存成 Session 或 Checkpoint")
    return EXIT_OK


# 动手改一改：README 同名一节列出几处一行的改动和自检抓住每一处时打印的行；改完跑 --self-check。


# ======================== 第三部分：附录——真实世界的防护 ========================
# 五套机制，各在自己的横幅下，横幅写着它的规则：文字与 redact()、响应、请求失败、环境、命令行。

# ---- 文字：外来的值变成有界的一行；给人看之前一律经过 redact() ----
# 能操纵终端的字符：C0（换行、制表符除外）、DEL、C1（如 U+009B CSI）、双向文字控制符
TERMINAL_UNSAFE = "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]"
NEVER_SHOWN = (*ECHOED_MESSAGE_FIELDS, *ECHOED_CALL_FIELDS, "reasoning", "thinking")
MISSING = "（缺失）"


def json_type_name(value: object) -> str:  # 错误交回模型：说 JSON 的类型名，不说 Python 的
    names = {bool: "布尔值", float: "小数", str: "字符串", dict: "对象", list: "数组"}
    return "空值 null" if value is None else names.get(type(value), f"「{type(value).__name__}」")


def clip(value: object, limit: int = 200) -> str:
    """任意外来的值变成有界的一行（换行变空格，孤立的代理字符写成 \\ud800），长了就截断。"""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=repr)
    text = re.sub(r"[\t\n\r]+", " ", text.encode("utf-8", "backslashreplace").decode()).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def shown_value(value: object) -> str:
    """正常的值原样显示；空串、null 等用 JSON 写法，免得在屏幕上看不见。"""
    return clip(value if isinstance(value, str) and value else json.dumps(value, default=repr), 40)


def is_text(value: object) -> bool:
    """是能按 UTF-8 原样发回去的字符串；JSON 里的孤立代理字符（如 \\ud800）做不到。"""
    return isinstance(value, str) and value.encode("utf-8", "replace").decode() == value


def content_parts(content: object) -> list:
    """content 的各段：字符串（或 null）算一个 text 片段，列表就是它自己的片段。"""
    return content if isinstance(content, list) else [{"type": "text", "text": content or ""}]


def text_of(content: object) -> str:
    """content 里 text 片段的文字（thinking 片段是推理）；形状已由 field_problem 查过。"""
    return "".join(part["text"] for part in content_parts(content) if part["type"] == "text")


def provider_text(body: object) -> str:
    """Provider 的原话：拆开 [...]、{"error": ...} 和 OpenRouter 的 metadata.raw；网页取标题。"""
    body = body[0] if isinstance(body, list) and body else body  # Gemini 把错误包在列表里
    if isinstance(body, dict):
        inner = body.get("error", body.get("errors", body))  # 魔搭的 429 用 "errors"
        if not isinstance(inner, dict):
            return clip(inner)
        said = clip(inner.get("message") or inner)
        metadata = inner.get("metadata")
        raw = metadata.get("raw") if isinstance(metadata, dict) else None
        try:  # noqa: SIM105  raw 常是一段 JSON 文本，也可能只是文字
            raw = json.loads(raw)
        except (TypeError, ValueError, RecursionError):
            pass
        return clip(f"{said}：{provider_text(raw)}") if raw else said
    if not isinstance(body, str):
        return clip(body)
    head = body[:4000] + ("…" if len(body) > 4000 else "")  # 只看开头：找标题的工作量有上限
    title = re.search(r"(?is)<title>(.*?)(?:</title>|$)", head)
    page = title[1] if title else head
    text = " ".join(re.sub(r"<[^<>]*(>|$)", " ", page).replace("<", " ").split())
    if text or not body.strip():
        return clip(text) or "（空响应体）"
    return f"（{len(body)} 个字符的响应体里没有可读的文字）"


def redact(text: str, secrets: set) -> str:
    """给人看之前的唯一一道关：秘密的各种写法、地址里的 用户名:密码@ 都换成 ***；控制字符转义。"""
    from urllib.parse import quote

    for secret in sorted(secrets, key=len, reverse=True):
        forms = {quote(secret), quote(secret, safe=""), clip(secret, 10**9)}
        for _ in range(4):  # JSON 字符串里的 JSON（如 arguments）每套一层就多转义一次
            forms.add(secret)
            secret = json.dumps(secret)[1:-1]
        for form in forms:
            text = text.replace(form, "***")
            for size in range(len(form) - 1, 7, -1):  # 从长到短：半个 key 也是泄露
                text = text.replace(form[:size] + "…", "***…")
    text = re.sub(r"\b([A-Za-z][\w+.-]*://)[^\s/@]+@", r"\1***@", text)
    return re.sub(TERMINAL_UNSAFE, lambda match: f"\\u{ord(match[0]):04x}", text)


def for_display(value: object, key: str = "") -> object:
    """给人看的历史或响应：推理和签名只写“（已省略）”，content 开头的推理块也一样。"""
    if isinstance(value, (list, dict)):
        pairs = value.items() if isinstance(value, dict) else enumerate(value)
        tidy = {k: "（已省略）" if k in NEVER_SHOWN else for_display(v, k) for k, v in pairs}
        return tidy if isinstance(value, dict) else list(tidy.values())
    if key == "content" and isinstance(value, str) and without_reasoning(value) != value.lstrip():
        return "<think>（已省略）</think>" + without_reasoning(value)
    return value


def plain(value: object) -> object:
    """SDK 的响应对象、自检的 SimpleNamespace 变成 dict 与 list；类型不对的字段也照样交出来。"""
    fields = lambda o: o.to_dict(warnings=False) if hasattr(o, "to_dict") else vars(o)  # noqa: E731
    return json.loads(json.dumps(value, default=fields))


def as_json(value: object) -> str:
    """印给人看的 JSON：推理和签名照 for_display() 省略。"""
    return json.dumps(for_display(plain(value)), ensure_ascii=False, indent=2)


class SafeOutput:
    """包住 stdout/stderr：每个字先过 redact()；写不出去（管道关了、磁盘满了）就记下来。"""

    def __init__(self, stream: object, secrets: set, flush_first: object = None):
        self.stream, self.secrets, self.flush_first = stream, secrets, flush_first
        self.failed, self.status_width = stream is None, 0

    def write(self, text: str) -> int:
        self.status("")  # 临时状态行先擦掉，再写真正的输出
        getattr(self.flush_first, "flush", bool)()  # 先冲刷 stdout：2>&1 | tee 时行的先后才对
        text = redact(text.replace("\r\n", "\n"), self.secrets)  # 单独的 \r 才转义
        encoding = getattr(self.stream, "encoding", None) or "utf-8"
        self._try("write", text.encode(encoding, "backslashreplace").decode(encoding))
        return len(text)

    def flush(self) -> None:
        self._try("flush")

    def status(self, text: str) -> None:
        """终端上的一行临时状态，下一次调用（空串）擦掉它；不是终端就什么都不写。"""
        if getattr(self.stream, "isatty", bool)() and (text or self.status_width):
            self._try("write", "\r" + " " * self.status_width + "\r" + text)
            self._try("flush")
            self.status_width = 2 * len(text)  # 中文字在终端里占两格

    def _try(self, method: str, *args: str) -> None:
        try:
            if not self.failed:
                getattr(self.stream, method)(*args)
        except (OSError, ValueError):  # 管道已关、磁盘已满、流已关闭
            self.failed = True


# ---- 响应：形状说不通就停下并点名字段；认出整段就是一个调用的“回答” ----
def check_response_shape(response: object) -> None:
    """没有可用的 choices[0]，或字段不能原样回传，就停在这里；HTTP 200 里的错误转述原话。"""
    choices = getattr(response, "choices", None)
    if not isinstance(choices, list) or not choices:  # HTTP 200，却是一张网页或一个错误
        said = plain(response)
        said = said[0] if isinstance(said, list) and said else said  # Gemini 的 [{"error": …}]
        said = said.get("error") if isinstance(said, dict) else said
        what = f"HTTP 200 里没有回复：{provider_text(said)}" if said else "响应里没有 choices"
        raise provider_stop(what, None, said, HINT_PAGE if isinstance(said, str) else "")
    said = getattr(choices[0], "error", None)
    if said:  # OpenRouter 把生成途中的错误放在这里
        what = f"Provider 在 choices[0].error 里报错：{provider_text(said)}"
        raise provider_stop(what, None, said)
    problem = field_problem(choices[0], getattr(choices[0], "message", None))
    if problem:
        raise AgentStop(PROVIDER, f"响应没法照 OpenAI 协议读：{problem}", HINT_ENDPOINT)


def field_problem(choice: object, message: object) -> str:
    """第一个缺了、或不能原样回传的字段，说出它的名字和值；都没问题时是空串。"""
    for owner, name in ((choice, "finish_reason"), (message, "content"), (message, "tool_calls")):
        if not hasattr(owner, name):
            return f"choices[0] 里没有 {name}"
    for number, part in enumerate(content_parts(message.content), start=1):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind != "thinking" and not (kind == "text" and is_text(part.get("text"))):
            return f"content 的第 {number} 段不是文本：{clip(part, 80)}"
    if not is_text(getattr(message, "reasoning_content", None) or ""):
        return "reasoning_content 不是文本"
    if not isinstance(message.tool_calls, (list, type(None))):
        return f"tool_calls 是{json_type_name(message.tool_calls)}，不是列表"
    for number, call in enumerate(message.tool_calls or [], start=1):
        function, where = getattr(call, "function", None), f"第 {number} 个 Tool Call 的"
        if getattr(call, "type", None) != "function":
            return f"{where} type 是 {shown_value(getattr(call, 'type', MISSING))}，不是 function"
        for name in ("name", "arguments"):
            if not is_text(getattr(function, name, None)):
                return f"{where} function.{name} 是 {shown_value(getattr(function, name, MISSING))}"
        if not is_text(getattr(call, "id", None) or ""):
            return f"{where} id 不是文本"
    return ""


# 整段就是一个调用才算（另有正文就是回答）：推理块已去掉，最多一层代码围栏，结尾的模板标记不算。
# 模板标记：<|channel|>（gpt-oss 的 Harmony）、<｜tool▁calls▁begin｜>（DeepSeek）、<tool_call> 等
TEMPLATE_MARKUP = r"<\|[^<>|]{1,40}\|>|<｜[^<>｜]{1,40}｜>|</?tool_call>|\[/?TOOL_CALLS\]"
TEMPLATE_MARKUP += "|<function="
NAME_KEYS, ARGUMENT_KEYS = {"name", "tool_name", "function"}, {"arguments", "parameters", "args"}


def looks_like_tool_call_text(text: str) -> bool:
    """以模板标记开头；整段是写着函数名和参数的 JSON、Gemma 的 ```tool_code、Llama 的 [f(a=1)]。"""
    body = re.sub(rf"(?:\s*(?:{TEMPLATE_MARKUP}))+\s*\Z", "", text.strip(), flags=re.I)
    fence = re.fullmatch(r"(```|~~~)[ \t]*([\w-]*)[ \t]*\n(.*?)\n?[ \t]*\1", body, re.S)
    if fence and re.fullmatch(r"tool_code|tool_calls?|function_call", fence[2], re.I):
        return True
    body = fence[3].strip() if fence else body
    if re.match(TEMPLATE_MARKUP, body, re.I):
        return True
    if re.fullmatch(r"\[\s*[A-Za-z_]\w*\(\s*\w+\s*=.*\)\s*\]", body, re.S):  # [multiply(a=2, b=3)]
        return True
    braces = len(body) - len(body.lstrip("{"))  # 模板的 {{ }} 漏进回答时，多出的花括号不算
    try:
        value, end = json.JSONDecoder().raw_decode(body, max(braces - 1, 0))
    except (ValueError, RecursionError):
        return False
    if body[end:].strip("} \t\n"):  # JSON 后面还有别的文字：那是回答
        return False
    value = value.get("tool_calls", value) if isinstance(value, dict) and len(value) == 1 else value
    return all(map(is_written_call, value if isinstance(value, list) and value else [value]))


def is_written_call(value: object) -> bool:
    """{"name": "multiply", "arguments": {…}}，或 OpenAI 的 {"type": "function", "function": …}。"""
    inner = value.get("function") if isinstance(value, dict) else None
    value = inner if isinstance(inner, dict) and set(value) <= {"id", "type", "function"} else value
    if not isinstance(value, dict) or set(value) - NAME_KEYS - ARGUMENT_KEYS - {"id", "type"}:
        return False  # 多出 description、result 之类的键：那是工具定义或结果，不是调用
    names = [value[key] for key in NAME_KEYS & set(value)]
    arguments = [value[key] for key in ARGUMENT_KEYS & set(value)]
    if len(names) != 1 or len(arguments) != 1 or not isinstance(names[0], str):
        return False
    shaped = isinstance(arguments[0], dict) or str(arguments[0]).lstrip().startswith("{")
    return shaped and re.fullmatch(r"[A-Za-z_][\w.-]*", names[0]) is not None


# ---- 请求失败：只翻译外部世界的失败；先引用 Provider 的原话，只给知道的建议 ----
HINT_WORDS = "按上面 Provider 的原话处理"
HINT_KEY = "检查 OPENAI_API_KEY：是否完整、没过期，是否属于 OPENAI_BASE_URL 那家 Provider（和地区）"
HINT_BALANCE = "余额、额度或免费额度用完了，或账户欠费：到 Provider 控制台充值或开通付费，或换 key"
HINT_MODEL = "检查 OPENAI_MODEL：与 Provider 模型列表一字不差、账户已开通；经网关时令牌要有权用它"
HINT_PATH = "再看 OPENAI_BASE_URL 的路径（多以 /v1 结尾；智谱 /api/paas/v4，火山方舟 /api/v3）"
HINT_RATE = "触发了频率、并发或用量限制：稍等再试；一直如此就查 Provider 控制台里的限额"
HINT_NO_TOOLS = "换支持 tools 的模型或端点（vLLM 开自动工具选择，llama.cpp 加 --jinja）；不用改工具"
HINT_THINKING = "这个模型思考时只收流式请求，本课发普通请求：换个不思考的模型（README 每家都列了）"
HINT_ECHO = "脚本已原样带回 Provider 要的推理字段和签名；仍报这个错，多半是中间的网关丢了它们"
HINT_REGION = "这家 Provider 不向你所在的国家或地区提供服务：换一家（README 里有国内的）"
HINT_CONTEXT = "超出了模型的上下文或输出长度：缩短问题，或换上下文更大的模型"
HINT_PAGE = "OPENAI_BASE_URL 多半指向了网页而不是 API：照 Provider 文档填 API 的地址"
STATUS_HINTS = {401: HINT_KEY, 402: HINT_BALANCE, 404: f"{HINT_MODEL}；{HINT_PATH}", 429: HINT_RATE}
# Provider 原话（连同错误码、类型；小写，_ 与 %20 当空格）里认得的字样 -> 失败的一环、建议。
# 不论状态码，从上往下先命中的算数；每一行的出处见 README 的“Provider 的原话与建议”
KNOWN_WORDS = [
    ("does not support tools|param: tools|tool choice requires", MODEL, HINT_NO_TOOLS),
    ("tools param requires|support tool use|not support function call", MODEL, HINT_NO_TOOLS),
    ("enable thinking|only support stream", MODEL, HINT_THINKING),
    ("thought signature|reasoning (content|details)|must be passed back", PROVIDER, HINT_ECHO),
    ("unsupported country|territory not supported", PROVIDER, HINT_REGION),
    ("insufficient (balance|quota)|balance is insufficient|current quota", PROVIDER, HINT_BALANCE),
    ("paid balance|arrearage|overdue|good standing|free tier", PROVIDER, HINT_BALANCE),
    ("quota is not enough|余额不足|欠费|额度", PROVIDER, HINT_BALANCE),
    ("incorrect api key|invalid (api.key|authentication|token)|login fail", PROVIDER, HINT_KEY),
    ("api key is invalid|authentication fail|无效的令牌|身份验证失败", PROVIDER, HINT_KEY),
    ("token ?(非法|已过期)|令牌已过期", PROVIDER, HINT_KEY),
    ("model not found|does not exist|模型不存在|not found the model", PROVIDER, HINT_MODEL),
    ("model [^ ]+ (is )?not supported|无可用渠道|no available channel", PROVIDER, HINT_MODEL),
    ("无权(使用|访问)模型|not activated the model", PROVIDER, HINT_MODEL),
    ("context length|maximum context|token limit|too long|超长", MODEL, HINT_CONTEXT),
    ("input length|exceeds max", MODEL, HINT_CONTEXT),
    ("rate ?limit|too many requests|throttling|limit requests|request limit", PROVIDER, HINT_RATE),
    ("usage limit|overloaded|并发|频率|速率限制|访问量过大", PROVIDER, HINT_RATE),
    ("inappropriate content|data inspection|sensitive content|敏感", PROVIDER, HINT_POLICY),
    ("high risk|unsafe", PROVIDER, HINT_POLICY),
    ("bind your", PROVIDER, HINT_WORDS),  # 魔搭的 401：先绑定阿里云账号，不是 key 错了
]

HINT_LOCAL = "本地服务（Ollama、llama.cpp、vLLM）用 http://，不是 https://"
HINT_DEADLINE = "慢或限流（SDK 可能在等 Retry-After）：稍后再试，或调大 OPENAI_TIMEOUT"
HINT_CERTIFICATE = "设了 SSL_CERT_FILE、SSL_CERT_DIR 就检查它们；公司网络可能有中间人证书"
HINT_OS = "不是网络或 SDK 的问题：关掉别的程序，或放宽资源限制（ulimit）后再试"
HINT_PROXY = (  # Clash、V2Ray 常给 socks5:// 代理，httpx 要多装 socksio 才能用
    "检查 {name}：代理是否在运行、地址（普通代理用 http://，socks5:// 要 python -m pip install "
    "socksio）、端口和认证；本机或内网端点加进 NO_PROXY（如 127.0.0.1,localhost），或 unset {name}"
)
BROKEN_OFF = "连上了服务器，但响应中途断开或无法解码"
FAILURES = [  # 没有状态码的失败：异常链里某个异常的类名（含基类），先命中的算数。最后一列为 1：
    # 失败发生在连接的第一跳，有代理时那就是代理。类名由 SDK、httpx、ssl 决定，这里只是认
    ("WholeRequestTimeout", SDK_NETWORK, "请求超时", HINT_DEADLINE, 0),
    ("MemoryError", SDK_NETWORK, "内存不够：操作系统不给，或响应大得离谱", HINT_OS, 0),
    ("SSLCertVerificationError", SDK_NETWORK, "TLS 证书校验失败", HINT_CERTIFICATE, 1),
    ("SSLError", SDK_NETWORK, "TLS 握手失败：这个端口说的多半是 http", HINT_LOCAL, 1),
    ("ConnectTimeout", SDK_NETWORK, "几秒内没能建立连接", f"检查地址和端口；{HINT_LOCAL}", 1),
    ("ConnectError", SDK_NETWORK, "连不上服务器", "检查端点的地址、端口和服务是否已启动", 1),
    ("ProxyError", SDK_NETWORK, "代理拒绝转发这个请求", "检查代理的地址和认证", 1),
    ("TooManyRedirects", SDK_NETWORK, "重定向循环", "用 curl -I 看 OPENAI_BASE_URL 跳到哪", 0),
    ("TimeoutException", SDK_NETWORK, "请求超时", "本地模型慢就调大 OPENAI_TIMEOUT（秒）", 0),
    ("TransportError", SDK_NETWORK, BROKEN_OFF, "看服务端日志和中间的代理", 0),  # 超时的父类
    ("DecodingError", SDK_NETWORK, BROKEN_OFF, "看服务端日志和中间的代理", 0),
    ("JSONDecodeError", PROVIDER, "服务器回了 HTTP 200，响应体却不是完整的 JSON", HINT_PAGE, 0),
    ("RecursionError", PROVIDER, "响应体嵌套太深，解析不了", "是端点送来的东西有问题：换端点", 0),
    ("APIError", SDK_NETWORK, "SDK 报告请求失败", "看括号里 SDK 的原话", 0),  # SDK 的异常家族
]


def provider_stop(what: str, status: object, body: object, otherwise: str = "") -> AgentStop:
    """what 已引用了原话。建议按原话里认得的字样给，认不出再看状态码，都没有就请人照原话办。"""
    words = re.sub(r"%20|[\s_]+", " ", json.dumps(body, ensure_ascii=False, default=repr).lower())
    known = [(link, hint) for pattern, link, hint in KNOWN_WORDS if re.search(pattern, words)]
    link, hint = (known or [(PROVIDER, STATUS_HINTS.get(status, otherwise or HINT_WORDS))])[0]
    return AgentStop(link, what, hint, EXIT_REQUEST_FAILED if status else EXIT_STOPPED)


def explain_request_failure(error: BaseException, proxy: tuple) -> AgentStop | None:
    """SDK 与线路能抛出的失败变成两行报告；认不出的不是外部世界的失败，返回 None：那是 bug。"""
    chain = [error]
    while len(chain) < 10 and (chain[-1].__cause__ or chain[-1].__context__) is not None:
        chain.append(chain[-1].__cause__ or chain[-1].__context__)
    kinds = {cls.__name__ for item in chain for cls in type(item).__mro__}
    status = getattr(error, "status_code", None) if "APIStatusError" in kinds else None
    row = next((row for row in FAILURES if row[0] in kinds), None)
    if status is None and row is None:
        return None
    if status:
        what = f"HTTP {status}：{provider_text(error.body or str(error))}"
        first_hop = status in (407, 502)  # 有代理时，407、502 是代理自己的错误页
    else:
        _, link, reason, hint, first_hop = row
        what = f"{reason}（{type(error).__name__}: {clip(str(error.__cause__ or error), 120)}）"
    if proxy and first_hop:
        what = f"请求没能经代理 {proxy[1]}（{proxy[0]}）送到端点：{what}"
        return AgentStop(SDK_NETWORK, what, HINT_PROXY.format(name=proxy[0]), EXIT_REQUEST_FAILED)
    if status:
        return provider_stop(what, status, error.body)
    return AgentStop(link, what, hint, EXIT_REQUEST_FAILED)


class WholeRequestTimeout(TimeoutError): ...  # 整次请求（含重试）超过了总期限


# OPENAI_TIMEOUT 只限每次读 socket：每秒滴一个字节的服务器能把一次请求拖上几分钟，所以另设总期限
class DeadlineClient:
    """请求在后台线程里跑，主线程只等到总期限，终端上显示已等几秒；外部世界的失败变成 AgentStop。"""

    def __init__(self, client: object, seconds: float, proxy: tuple):
        self.client, self.seconds, self.proxy = client, seconds, proxy
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self.create))

    def create(self, **request: object) -> object:
        import threading
        from concurrent.futures import Future, wait

        outcome = Future()  # 装着响应，或 SDK 抛出的异常

        def call() -> None:
            try:
                outcome.set_result(self.client.chat.completions.create(**request))
            except Exception as error:
                outcome.set_exception(error)

        try:
            threading.Thread(target=call, daemon=True).start()  # 不用线程池：它退出时要等线程
        except RuntimeError as error:  # can't start new thread：操作系统不再给线程
            what = f"操作系统拒绝了新线程（{error}）"
            raise AgentStop(SDK_NETWORK, what, HINT_OS, EXIT_REQUEST_FAILED) from None
        status = getattr(sys.stderr, "status", lambda text: None)
        for waited in range(1, int(self.seconds) + 2):  # 每秒醒来一次，报告已经等了几秒
            if wait([outcome], min(1.0, self.seconds - waited + 1)).done:
                break
            status(f"…等待响应 {waited} 秒")
        status("")  # 步骤行写在 stdout 上：返回之前先擦掉
        late = WholeRequestTimeout(f"整次请求（含重试）超过 {self.seconds:g} 秒仍未完成")
        error = outcome.exception() if outcome.done() else late
        if error is None:
            return outcome.result()
        raise explain_request_failure(error, self.proxy) or error  # 认不出的原样抛出：是 bug


# ---- 环境：每个变量只查一次，说出人犯的错；代理用 httpx 自己的规则决定一次，交给 SDK ----
CONNECT_SECONDS = 5.0  # 与 SDK 自己的默认连接期限相同
DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_TIMEOUT_SECONDS, MAX_TIMEOUT_SECONDS = 60.0, 3600.0  # SDK 默认等 10 分钟，学习时太久
MAX_RETRIES = 1  # SDK 默认重试 2 次；配置错误（如 500 Unsupported param）重试也没用
VARIABLES = ("OPENAI_API_KEY", "OPENAI_MODEL", "OPENAI_BASE_URL", "OPENAI_TIMEOUT")
ORG_VARIABLES = ("OPENAI_ORG_ID", "OPENAI_PROJECT_ID")  # OpenAI 自己的概念：只发给 OpenAI
# 像 key 的一段：sk-…、gsk_…、xai-…、AIza…、JWT、32 位以上的字母数字（智谱）、UUID
KEY_LIKE = re.compile(
    r"\b(?:sk|gsk|xai)[-_][\w-]{8,}|\bAIza[\w-]{20,}|\beyJ[\w-]{10,}\.[\w.-]+|[A-Za-z0-9]{32,}"
    r"|\b[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}\b"
)
HINT_URL = "只写协议、主机、端口和路径，照 Provider 文档写，例如 http://127.0.0.1:11434/v1"
HINT_INSTALL = (
    "先激活 README 第 2 步建的虚拟环境（. .venv/bin/activate，Windows 是 .venv\\Scripts\\"
    'Activate.ps1），还没建就照第 2 步建；或在虚拟环境里 pip install "openai>=1.109.1,<4"'
)


def secrets_in(environ: dict) -> set:
    """输出里要遮住的：OPENAI_API_KEY、会被读到的变量里像 key 的一段、地址里的 用户名:密码。"""
    key = environ.get("OPENAI_API_KEY", "").strip()
    found = {key} if len(key) >= 8 else set()  # 更短的多是本地服务的占位符，如 local
    for name, value in environ.items():
        if re.fullmatch(r"(?i)openai_\w*|\w*_proxy|ssl\w*", name):
            found.update(KEY_LIKE.findall(value))
            userinfo = re.findall(r"(?s)^\s*(?:[A-Za-z][\w+.-]*:/*)?(.+)@", value)  # 到最后的 @
            found.update(userinfo)
            passwords = [info.partition(":")[2] for info in userinfo]  # 单独出现也要遮
            found.update(password for password in passwords if len(password) >= 8)
    return found


def config_problem(name: str, value: str) -> tuple:
    """一个变量的一次检查：先找人常犯的错，再看它自己的规则；返回 (错在哪, 怎么改) 或 ()。"""
    import unicodedata

    odd = [i for i, c in enumerate(value) if c.isspace() or not (c.isascii() and c.isprintable())]
    if re.fullmatch(r"""["'“‘].*["'”’]""", value, re.S):
        return "两边带着引号（多半是从 .env 文件连引号一起复制来的）", "去掉两边的引号"
    if name == "OPENAI_API_KEY" and re.match(r"(?i)bearer\s", value):
        return "开头多了 Bearer（那是 HTTP 头的写法，SDK 会自己加）", "删掉 Bearer 和空格，只留 key"
    if name == "OPENAI_API_KEY" and re.match(r"(?i)https?:", value):
        return "像一个地址，不像 key", "OPENAI_API_KEY 和 OPENAI_BASE_URL 可能填反了"
    # 地址的路径里可以有像 key 的一段（Cloudflare 的 32 位账户 id）：不像地址、又像 key 才是填反了
    is_url = name == "OPENAI_BASE_URL" and re.match(r"(?i)https?://", value)
    if name != "OPENAI_API_KEY" and not is_url and KEY_LIKE.search(value):
        return "像一个 API Key（没有打印它）", f"OPENAI_API_KEY 和 {name} 可能填反了：key 只放前者"
    if odd and name != "OPENAI_MODEL":  # 模型名可以不是 ASCII；地址、key、数字、HTTP 头里的值不行
        char, position = value[odd[0]], odd[0] + 1
        half = unicodedata.normalize("NFKC", char)
        where = f"第 {position} 个字符"
        if char.isspace():
            return f"{where}是空白 {json.dumps(char)}", "删掉它（Windows 上存 .env 要用 LF 换行）"
        if half.isascii() and half.isprintable():
            return f"{where}是全角的「{char}」", f"换成半角的「{half}」（输入法切到英文再打）"
        return f"{where} {json.dumps(char)} 不是 ASCII", "重新输入，只用英文字母、数字和符号"
    if name == "OPENAI_MODEL" and not is_text(value):
        return "含有无法按 UTF-8 发送的字符", "检查终端编码后重新设置"
    number = float(value) if re.fullmatch(r"\d*\.?\d+", value) else 0.0
    if name == "OPENAI_TIMEOUT" and not 0 < number <= MAX_TIMEOUT_SECONDS:
        return f"要是 0 到 {MAX_TIMEOUT_SECONDS:.0f} 之间的秒数", "例如 export OPENAI_TIMEOUT=60"
    problem = base_url_problem(value) if name == "OPENAI_BASE_URL" else ""
    return (problem, HINT_URL) if problem else ()


def base_url_problem(url: str) -> str:
    """地址里 SDK 会悄悄改写或误用的部分：端口越界、查询参数、用户名密码、完整的接口路径。"""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:  # 例如端口 99999 或 abc、没闭合的 [IPv6]
        return "地址无法解析：端口要是 1–65535 之间的数字，IPv6 地址要用 [] 括好"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "要以 http:// 或 https:// 开头，并写明主机"
    if port == 0:
        return "端口要在 1–65535 之间"
    if "@" in parts.netloc:
        return "地址里不能写用户名或密码：SDK 会改用它们认证，key 就不再生效"
    if parts.query or parts.fragment:
        return "地址里不能带 ?查询参数 或 #片段：SDK 会把 /chat/completions 拼在它们后面"
    if parts.path.rstrip("/").endswith("/chat/completions"):
        return "写到 /chat/completions 之前为止，SDK 会自己拼上它"
    return ""


def check_variable(name: str, value: str) -> None:
    """config_problem 找到错就停下（退出码 2）。key、像 key 的值从不回显。"""
    problem = config_problem(name, value) if value else ()
    if problem:
        hidden = name == "OPENAI_API_KEY" or KEY_LIKE.search(value)
        echoed = "" if hidden else f"（{clip(value, 120)}）"
        raise config_error(f"{name} 不可用{echoed}：{problem[0]}", problem[1])


def config_error(what: str, hint: str) -> AgentStop:
    return AgentStop(HARNESS, what, hint, EXIT_USAGE)


def check_config(environ: dict) -> dict:
    """在发出任何请求之前，把缺的、填错的环境变量说清楚（退出码 2）；返回创建客户端所需的值。"""
    from urllib.parse import urlsplit

    value = {name: environ.get(name, "").strip() for name in (*VARIABLES, *ORG_VARIABLES)}
    for name, hint in (
        ("OPENAI_API_KEY", "本地服务（Ollama、llama.cpp）不校验 key，随便填一个，例如 local"),
        ("OPENAI_MODEL", "填写 Provider 上支持 Tool Calling 的模型名"),
    ):
        if not value[name]:
            raise config_error(f"缺少环境变量 {name}", f"export {name}=...；{hint}")
    for name in VARIABLES:
        check_variable(name, value[name])
    base_url = value["OPENAI_BASE_URL"] or DEFAULT_BASE_URL  # 显式给出：否则 SDK 会读一个空变量
    for name in ORG_VARIABLES:  # 只发给 OpenAI 官方：留下的旧值不跟着请求去第三方端点
        if (urlsplit(base_url).hostname or "").endswith("api.openai.com"):
            check_variable(name, value[name])
        else:
            value[name] = ""
    timeout = float(value["OPENAI_TIMEOUT"] or DEFAULT_TIMEOUT_SECONDS)
    return {
        "api_key": value["OPENAI_API_KEY"],
        "model": value["OPENAI_MODEL"],
        "base_url": base_url,
        "base_url_given": bool(value["OPENAI_BASE_URL"]),
        "organization": value["OPENAI_ORG_ID"] or None,
        "project": value["OPENAI_PROJECT_ID"] or None,
        "timeout": timeout,
        "deadline": timeout * (MAX_RETRIES + 1) + 1,  # 每次尝试一个 timeout，再留一秒余量
    }


def proxy_for(url: str, http: object) -> tuple:
    """这个地址要走的代理：(设它的变量, 代理地址) 或 ()；用 httpx 自己的函数定，决定与它一致。"""
    mounts = http._utils.get_environment_proxies()
    patterns = sorted(map(http._utils.URLPattern, mounts))  # 与 httpx 挑选 mount 的顺序相同
    chosen = next((p.pattern for p in patterns if p.matches(http.URL(url))), None)
    if not (chosen and mounts[chosen]):
        return ()
    names = [n for n in sorted(os.environ, key=str.isupper) if n.lower() == chosen[:-3] + "_proxy"]
    return ([n for n in names if os.environ[n]] or ["系统代理设置"])[0], mounts[chosen]


def imported_sdk() -> object:
    """import openai；没装、装坏了、被脚本旁边同名的 openai.py 或 openai/ 挡住了，各说各的。"""
    try:
        import openai
        from openai import DefaultHttpxClient, Omit, OpenAI  # noqa: F401  同名的 openai.py 没有
    except Exception as error:
        from importlib.util import find_spec

        spec = find_spec("openai")  # sys.modules 里放着 None 时，它也返回 None
        where = spec and (spec.origin or next(iter(spec.submodule_search_locations or []), None))
        if where and not re.search(r"[/\\](site|dist)-packages[/\\]", where):
            what = f"导入的 openai 不是 SDK，而是 {clip(where, 160)}"
            raise config_error(what, "给它改个名字（别叫 openai），再运行") from None
        broken = f"openai SDK 导入失败（{type(error).__name__}: {clip(str(error), 120)}）"
        raise config_error(broken if where else "没有安装 openai SDK", HINT_INSTALL) from None
    return openai


def make_client(config: dict) -> DeadlineClient:
    """创建 SDK 客户端：它只拿到脚本决定好的 key、地址、组织与项目、期限和代理，不再自己读环境。"""
    openai = imported_sdk()
    # SDK 用的 HTTP 库（openai 3.x 是 httpx2，更早的是 httpx）：代理的规则问它，不自己另写一套
    http = sys.modules[openai.DefaultHttpxClient.__mro__[1].__module__]
    try:
        proxy = proxy_for(config["base_url"], http)
    except (ValueError, http.InvalidURL) as error:  # httpx 自己也解析不了某个代理变量
        what = f"httpx 解析不了代理变量（{type(error).__name__}: {clip(str(error), 160)}）"
        raise config_error(what, "检查 NO_PROXY 与 *_PROXY 的写法，或运行前 unset 它们") from None
    # SDK 还会自己从环境读组织、项目和 OPENAI_CUSTOM_HEADERS：没交给它的，用 Omit 一一盖掉
    custom = os.environ.get("OPENAI_CUSTOM_HEADERS", "").splitlines()
    headers = {line.partition(":")[0].strip(): openai.Omit() for line in custom}
    unset = {"OpenAI-Organization": config["organization"], "OpenAI-Project": config["project"]}
    headers.update({name: openai.Omit() for name, given in unset.items() if given is None})
    headers["Authorization"] = f"Bearer {config['api_key']}"
    given = {key: config[key] for key in ("api_key", "base_url", "organization", "project")}
    # 连接（含 TLS 握手）单独限时：协议或端口填错几秒就报错，不必等满 OPENAI_TIMEOUT
    timeout = openai.Timeout(config["timeout"], connect=min(config["timeout"], CONNECT_SECONDS))
    try:
        transport = http.HTTPTransport(proxy=proxy[1] if proxy else None)  # 证书仍照 SSL_CERT_FILE
        http_client = openai.DefaultHttpxClient(transport=transport, trust_env=False)
        options = {"timeout": timeout, "max_retries": MAX_RETRIES, "default_headers": headers}
        client = openai.OpenAI(**given, **options, http_client=http_client)
    except (OSError, ImportError, ValueError, http.InvalidURL) as error:  # 证书、代理、地址
        detail = f"{type(error).__name__}: {clip(str(error), 160)}"
        named = [n for n in ("SSLKEYLOGFILE", "SSL_CERT_DIR", "SSL_CERT_FILE") if os.getenv(n)]
        if isinstance(error, OSError) and named:  # ssl 读证书文件失败；ssl.SSLError 也是 OSError
            name = next((n for n in named if os.environ[n] in str(error)), named[-1])
            what, hint = f"{name} 指向的文件不能用（{detail}）", f"改成有效的路径，或 unset {name}"
        elif proxy:
            what = f"SDK 用不了代理 {proxy[0]}={proxy[1]}（{detail}）"
            hint = HINT_PROXY.format(name=proxy[0])
        else:
            what, hint = f"无法创建 OpenAI 客户端：{detail}", HINT_URL
        raise config_error(what, hint) from None
    return DeadlineClient(client, config["deadline"], proxy)


# ---- 命令行：解析参数、运行，把 AgentStop 变成两行说明和退出码；别的异常是 bug ----
HELP = """\
用法：python3 lesson_03_tool_calling_loop.py [--show-messages] [问题……] | --self-check | --demo
  --self-check     离线自检：只用标准库，不需要 API Key
  --demo           离线演示：用预设的响应跑真正的 run_agent，不需要 API Key
  --show-messages  结束后（失败时也一样）把消息历史打印成 JSON
  问题             默认“帮我算一下 248 乘以 15”；几个词会连成一句；-- 之后的都算问题
在线运行读取的环境变量：
  OPENAI_API_KEY   必填；本地服务（Ollama、llama.cpp）不校验，填 local 即可
  OPENAI_MODEL     必填；支持 Tool Calling 的模型名
  OPENAI_BASE_URL  第三方或本地端点才要，照 Provider 文档写；不设就是 https://api.openai.com/v1
  OPENAI_TIMEOUT   每次读取的超时秒数，默认 60；整次请求（含 1 次重试）最多 2 倍再加 1 秒
  其余 OPENAI_* 一律不用（OPENAI_ORG_ID、OPENAI_PROJECT_ID 只发给 OpenAI 官方端点）；
  代理按 HTTP_PROXY、HTTPS_PROXY、ALL_PROXY、NO_PROXY，证书按 SSL_CERT_FILE、SSL_CERT_DIR
退出码：0 打印了回答（Loop 正常结束，不保证答对）；1 Loop 被停下（或自检失败、程序自身出错）；
        2 用法或配置错误；3 请求失败；4 回答没能写到标准输出；130 按了 Ctrl-C
例子：
  OPENAI_API_KEY=local OPENAI_MODEL=qwen2.5:7b OPENAI_BASE_URL=http://127.0.0.1:11434/v1 \\
      python3 lesson_03_tool_calling_loop.py 帮我算一下 6 乘以 7
  python3 lesson_03_tool_calling_loop.py '6 * 7 = ?'     # 含 ' * ? 的问题用引号括起来"""
OPTIONS = ("--self-check", "--demo", "--show-messages", "--help", "-h")


def parse_args(argv: list) -> tuple:
    """返回 (选项, 问题, 用法错误)。像 -x、--word 的才是选项，"-7 乘以 6" 仍是问题。"""
    import difflib

    end = argv.index("--") if "--" in argv else len(argv)  # -- 之后的都是问题
    options = [arg for arg in argv[:end] if re.fullmatch(r"--?[A-Za-z][\w-]*(=.*)?", arg)]
    words = [arg for arg in argv[:end] if arg not in options] + argv[end + 1 :]
    question, unknown = " ".join(words).strip(), [o for o in options if o not in OPTIONS]
    problem = ""
    if unknown:
        guess = difflib.get_close_matches(unknown[0].split("=")[0], OPTIONS, n=1)
        problem = f"不认识的选项：{clip(unknown, 80)}" + (f"，是不是 {guess[0]}？" if guess else "")
    elif {"--self-check", "--demo"} & set(options) and (words or len(set(options)) > 1):
        problem = "--self-check 和 --demo 只跑本地代码，不带问题或其他选项"
    elif words and not question:
        problem = "问题是空的"
    elif not is_text(question):  # 终端编码不对时，argv 里会混进无法按 UTF-8 发送的字符
        problem = "问题里有无法按 UTF-8 发送的字符，检查终端编码"
    return options, question or DEFAULT_QUESTION, problem


def run_command(argv: list, environ: dict) -> int:
    options, question, problem = parse_args(argv)
    if "-h" in options or "--help" in options:
        print(HELP)
        return EXIT_OK
    if problem:
        print(f"参数错误：{problem}\n{HELP.splitlines()[0]}（--help 看说明）", file=sys.stderr)
        return EXIT_USAGE
    if "--self-check" in options or "--demo" in options:
        return self_check() if "--self-check" in options else demo()
    messages, config, refused = [], {}, None
    try:
        config = check_config(environ)
        print("Agent> " + run_agent(make_client(config), config["model"], question, messages))
        return EXIT_OK
    except AgentStop as stop:
        report(stop, config)
        refused = stop.refused
        return stop.exit_code
    finally:  # 失败了、按了 Ctrl-C 也打印：看得到停在了哪里
        if "--show-messages" in options and messages:
            print(as_json(messages))
        if "--show-messages" in options and refused is not None:
            print(f"被拒收、没有写进历史的响应（Harness 停下的原因就在这里）：\n{as_json(refused)}")


def report(stop: AgentStop, config: dict, file: object = None) -> None:
    """两行：哪一环、第几步、原因（端点出的问题还写明端点和模型）；最后一个成功事件和建议。"""
    where = f"step {stop.step}: " if stop.step else ""
    endpoint = ""
    if stop.link != HARNESS and config:
        default = "" if config["base_url_given"] else "（没设 OPENAI_BASE_URL 时的默认值）"
        endpoint = f"；端点 {config['base_url']}{default}，模型 {clip(config['model'], 80)}"
    last_ok = f"最后一个成功事件：{stop.last_ok}；" if stop.last_ok else ""
    text = f"[{stop.link}] {where}{stop.reason}{endpoint}\n{last_ok}建议：{stop.hint}"
    print(text, file=file or sys.stderr)


def main(argv: list, environ: dict) -> int:
    """命令行入口，返回退出码。输出都经过 SafeOutput；回答没写出去就不算成功。"""
    secrets = secrets_in({**os.environ, **environ})
    saved = (sys.stdout, sys.stderr)
    out = SafeOutput(sys.stdout, secrets)
    err = SafeOutput(sys.stderr, secrets, flush_first=out)
    sys.stdout, sys.stderr = out, err
    try:
        code = run_command(argv, environ)
        out.flush()
        if code == EXIT_OK and out.failed:
            what = "[Harness] 输出没能写完（标准输出已关闭，或磁盘已满），回答或结果没有送到"
            print(f"{what}\n建议：检查输出重定向：磁盘空间、提前退出的管道（如 | head）", file=err)
            code = EXIT_OUTPUT_FAILED
    except KeyboardInterrupt:  # 无论正在做什么、写什么（包括 | less 里的历史），都只是一行
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # 写这一行时再按也一样
        out.failed, code = True, 130  # 没写完的输出不再写下去
        print("已中断（Ctrl-C）", file=err)
        signal.signal(signal.SIGINT, previous)
    except Exception:  # 不是外部世界的失败，是 Harness 自己（或改过的代码）的 bug：让它原样可见
        import traceback

        what = "[Harness] 程序自身出错了（不是 Provider 或网络的问题；改过代码就先查改动）："
        print(what, file=err)
        traceback.print_exc(file=err)
        code = EXIT_STOPPED
    finally:
        err.flush()
        sys.stdout, sys.stderr = saved
    return code


if __name__ == "__main__":
    exit_code = main(sys.argv[1:], dict(os.environ))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # 收尾时再按 Ctrl-C 也不打出 traceback
    # 输出端已关（如 | head）时，退出前的冲刷会打出 BrokenPipeError、退出码变成 120：改接到空设备
    for stream in filter(None, (sys.stdout, sys.stderr)):  # 2>&- 时 sys.stderr 是 None
        try:
            stream.flush()
        except (OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())
    sys.exit(exit_code)
