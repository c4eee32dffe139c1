# /// script
# requires-python = ">=3.9"
# dependencies = ["openai>=1.109.1,<4"]
# ///
"""第 3 课：跑通第一个 OpenAI-compatible Tool Calling Agent Loop（课文的可执行版本）。

课文例子里的一次 Turn（从提问到最终回答）有四条消息，多几次调用就多几条：
user -> assistant(tool_calls) -> tool(tool_call_id, result) -> assistant(final)

第一部分是课文（§1–§7，编号与课文相同），每条规则和它防的是什么都写在这里；第二部分是自检和
--demo（没有 API Key 也能看 Loop 真跑一遍）；第三部分只替第一部分格式化文字、判定细节、诊断
真实世界的失败（读响应的字节、翻译请求失败、检查环境变量、安全地打印）。
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
# 合法的参数不到 40 个字符。200 个字符最多嵌套 100 层，远低于 JSON 解析器的递归上限（约 1000 层）：
# 再深的嵌套也只是一个普通的解析错误；错误信息里引用的值也因此有界。
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
    # 紧凑写法：课文的步骤行打印的就是它，不带空格
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"))


# ---- §4 有限步 Agent Loop ----
# MAX_STEPS 限的是每轮 Turn 发给模型的请求次数（不是消息条数），保证花费和时间有个尽头；
# 至于模型为什么停不下来（反复调用、工具总报错、提示里没写何时收手），它不管，要另外查。
# 第 MAX_STEPS 次请求若仍要调用工具：工具照常执行、结果写进本地历史，但不会再有请求把它带给模型。
MAX_STEPS = 8
MAX_TOOL_CALLS = 32  # 失常的响应不该触发无界的工作；真实 Provider 的并行调用远少于此
# 停下时，报告说出失败的是哪一环（整条调用链见 §6；Router 与 Tool 的错误不停 Loop，交回模型）
HARNESS, SDK_NETWORK, PROVIDER, MODEL = "Harness", "SDK/网络", "Provider", "Model"
HINT_ENDPOINT = "这个端点的响应与 OpenAI 协议不一致，Harness 不会替它猜；换模型或端点再试"
HINT_POLICY = "换一种问法，或查看 Provider 的内容策略"


class AgentStop(Exception):
    """Loop 停下：带着失败的一环、原因和建议（第几步、被拒收的响应由 run_agent 补上）。全部停法：
    请求失败或配置有错；响应读不了，或 Provider 在 HTTP 200 里报错；有调用却没正常结束；缺 id、id
    重复；调用太多；stop 却不是回答（拒答、空回答、写成文字的调用）；length、content_filter 等；超过
    MAX_STEPS。参数填错不停：那是数据，交回模型。"""

    def __init__(self, link: str, reason: str, hint: str, exit_code: int = EXIT_STOPPED):
        super().__init__(reason)
        self.link, self.reason, self.hint, self.exit_code = link, reason, hint, exit_code
        self.step, self.refused = None, None


# finish_reason 说的是 Provider 为什么停止生成，与 message.tool_calls 同属一个 choice，两者要一致。
# length 是输出到了 Token 上限、被截断；content_filter 是被 Provider 过滤：消息可能只写了一半，
# 调用一个都不执行，文字也不当成 Final；不认识的值同样如此。关于 finish_reason 只有一处有意与课文
# 不同：有调用时课文只认 tool_calls，这里也认 stop（同样是自然结束），因为有的端点对本课这种没发
# tool_choice 的请求就这样回：Google 的 OpenAI 兼容端点（microsoft/autogen#4878）、经 OpenRouter
# 的 Qwen 与 Gemini 3（OpenRouterTeam/openrouter-examples-python#4 与 ai-sdk-provider#288）、OpenAI
# 自己（ENTERPILOT/GoModel#124）。这样的调用照样要过 id 和 Router 的检查。

# 回传什么：课文的 role、content、tool_calls，外加 Provider 要原样收回才能接着这一轮的不透明字段
# （推理、签名；缺了它回 HTTP 400）。别的私有字段它不认，带回去反而可能被拒。这些字段都不打印。
ECHOED_MESSAGE_FIELDS = ("reasoning_content", "reasoning_details")
ECHOED_CALL_FIELDS = ("extra_content",)


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


def final_answer(message: object) -> str:
    """finish_reason=stop 也可能不是回答，三种都停下：拒答（是拒绝，不是对问题的回答）；空回答（课文
    片段用 content or "" 收下了空串，这里不收）；写成文字的调用（回答里有聊天模板的控制标记，或整段
    就是一个调用：端点没把它解析成 tool_calls；Harness 不从文字里解析、执行它，那是替端点猜）。
    返回要打印的回答：开头的推理块不是回答，不打印。"""
    if getattr(message, "refusal", None):
        raise AgentStop(MODEL, f"模型拒绝回答：{clip(message.refusal)}", HINT_POLICY)
    text = answer_text(message.content)
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
            # 连不上、超时、HTTP 错误、读不懂的响应体：第三部分的客户端把它们变成 AgentStop
            response = client.chat.completions.create(model=model, messages=messages, tools=TOOLS)
            # 没有 choices[0]、Provider 在里面报错、要写进历史的字段发不回去：读下去就是猜，停下点名
            check_response_shape(response)
            choice = response.choices[0]
            message = choice.message
            print(f"step {step}: finish_reason={shown_value(choice.finish_reason)}")
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
            stop.step, stop.refused = step, response
            raise
    hint = "模型一直在调用工具；检查问题、模型能力，以及工具错误是否反复出现"
    raise AgentStop(HARNESS, f"超过最大步骤数：{MAX_STEPS}", hint)


# ---- §5 tool_call_id 为什么不能丢 ----
# 一次回复可以同时要好几个调用，结果靠 tool_call_id 对上是哪一个，就像订单号。本课的历史只有
# 三种角色：user 提问，assistant 说话或下单，tool 带着 id 交回结果（system、developer 放开发者
# 指令，工具定义放在请求顶层的 tools 里）。Anthropic 的 tool_use/tool_result 内容块是另一套协议。


# ---- §6 运行与自检 ----
# --self-check 用假的响应只验证本地代码（Router、参数校验、id 配对、控制流），证明不了 key、端点、
# 模型对不对。在线运行要设 OPENAI_API_KEY、OPENAI_MODEL，第三方端点再设 OPENAI_BASE_URL。出错时
# 沿调用链 Harness → SDK/网络 → Provider → Model → Assistant(tool_calls) → Router → Tool 找最后一个
# 成功事件和失败的一环（报告的两行写着它们）：第一次请求就收到“不支持 tools”，multiply 还没运行过，
# 该查的是模型能力、模型名、接口路径和端点，不是工具。


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


def fake_response(finish_reason: object, content: object = None, tool_calls: object = None, **more):
    """形状同 SDK 的 ChatCompletion：response.choices[0].message / .finish_reason。"""
    message = SimpleNamespace(role="assistant", content=content, tool_calls=tool_calls, **more)
    return SimpleNamespace(choices=[SimpleNamespace(message=message, finish_reason=finish_reason)])


def fake_turn(call_id: str, arguments: str = '{"a":248,"b":15}') -> object:  # 调用一次 multiply
    return fake_response("tool_calls", tool_calls=[fake_call(call_id, arguments)])


class FakeClient:
    """按顺序返回预设响应，并记下每次请求的 JSON 快照（SDK 也在调用时序列化）。"""

    def __init__(self, *responses: object):
        self.responses, self.requests = list(responses), []
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self.create))

    def create(self, **request: object) -> object:
        self.requests.append(json.loads(request_bytes(request)))  # 照 SDK 的序列化拍下这一刻
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
    kept = messages[1]["content"]  # 存成 null：Ollama 拒收，llama-cpp-python 回 HTTP 500
    expect(kept == "", f"调用旁的 content 应存成空串，实际 {kept!r}")
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
    call = SimpleNamespace(**vars(fake_call("functions.multiply:0")), extra_content=signature)
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
                report(stop, {}, messages, file=sys.stdout)
        if number == 1:  # 课文的一轮：四条消息
            print(json.dumps(messages, ensure_ascii=False, indent=2))
        if number == len(scenes):  # 同一个列表里的两轮 Turn，一条消息一行
            for message in messages:
                print(json.dumps(message, ensure_ascii=False))
            print(f"这 {len(messages)} 条消息只在内存里；下一课把它们存成 Session 或 Checkpoint")
    return EXIT_OK


# 动手改一改：README 同名一节列出几处一行的改动和自检抓住每一处时打印的行；改完跑 --self-check。


# ======================== 第三部分：附录——真实世界的防护 ========================
# 每一节是一套机制，横幅写着它的规则。规则的含义都在第一部分；这里只格式化、判定细节、诊断。

# ---- 文字：外来的值变成有界的一行；只显示课文讲到的字段；秘密只经过一道遮罩 ----
TERMINAL_UNSAFE = "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]"
SHOWN = {"role", "content", "text", "tool_calls", "tool_call_id", "id", "type", "function", "name"}
SHOWN |= {"arguments", "choices", "message", "finish_reason"}  # 课文讲到的字段：一份允许名单


def clip(value: object, limit: int = 200) -> str:
    """任意外来的值变成有界的一行（换行变空格，孤立的代理字符写成 \\ud800），长了就截断。"""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=repr)
    text = re.sub(r"[\t\n\r]+", " ", text.encode("utf-8", "backslashreplace").decode()).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def shown_value(value: object) -> str:
    """正常的值原样显示；空串、null 等用 JSON 写法，免得在屏幕上看不见。"""
    return clip(value if isinstance(value, str) and value else json.dumps(value, default=repr), 40)


def answer_text(content: object) -> str:
    """要打印的回答：text 片段连起来（thinking 片段是推理），去掉开头的推理块。"""
    parts = content if isinstance(content, list) else [{"type": "text", "text": content}]
    return without_reasoning("".join(p["text"] or "" for p in parts if p.get("type") == "text"))


def without_reasoning(text: str) -> str:
    """去掉开头的推理块 <think>…</think>，可以连着几块；模板把 <think> 放进提示时只剩 …</think>。
    推理没写完（只有 <think>）就整段都是推理。"""
    rest = re.sub(r"^(?:(?:<think>)?(?:(?!<think>).)*?</think>\s*)+", "", text.lstrip(), flags=re.S)
    return "" if rest.startswith("<think>") else rest


def as_json(value: object) -> str:
    """印给人看的 JSON：SDK 的对象、自检的 SimpleNamespace 先变成 dict 与 list。"""
    fields = lambda o: o.to_dict(warnings=False) if hasattr(o, "to_dict") else vars(o)  # noqa: E731
    plain = json.loads(json.dumps(value, default=fields))
    return json.dumps(for_display(plain), ensure_ascii=False, indent=2)


def for_display(value: object, key: str = "") -> object:
    """课文讲到的字段照常显示，别的（推理、签名、用量……）写成“（已省略）”；开头的推理块也一样。"""
    if isinstance(value, dict):  # 推理片段（type 不是 text）里的 text 也是推理
        shown = SHOWN if value.get("type") in (None, "text", "function") else {"type"}
        return {k: for_display(v, k) if k in shown else "（已省略）" for k, v in value.items()}
    if isinstance(value, list):
        return [for_display(item, key) for item in value]
    if key == "content" and isinstance(value, str) and without_reasoning(value) != value.lstrip():
        return "<think>（已省略）</think>" + without_reasoning(value)
    return value


def secrets_in(environment: dict) -> set:
    """要遮住的：8 个字符以上的 OPENAI_API_KEY（更短的多是 local 这样的占位符）、变量里像 key 的
    一段、地址里的 用户名:密码 和 8 个字符以上的密码。"""
    key = environment.get("OPENAI_API_KEY", "").strip()
    found = {key} if len(key) >= 8 else set()
    for name, value in environment.items():
        found.update(KEY_LIKE.findall(value))
        userinfo = re.findall(r"(?s)^\s*(?:[A-Za-z][\w+.-]*:/*)?(.+)@", value)  # 到最后的 @
        for info in userinfo if re.search(r"(?i)_proxy$|_url$", name) else []:  # 只有地址里有
            found.update(s for s in (info, info.partition(":")[2]) if len(s) >= 8 or s == info)
    return found


def secret_mask(secrets: set) -> object:
    """唯一的遮罩（返回做这件事的函数）：秘密的任何写法（原样、折成一行、JSON 转义一两层、大小写
    两种 %-转义）整段换成 ***；从某种写法的前 8 个字符起、连着秘密所用字符的一段（被人截断了的、
    藏在别的字里的）也换成 ***。任何地址里的 用户名:密码@ 换成 ***@，控制字符写成 \\uXXXX。"""
    from urllib.parse import quote

    forms, starts, alphabet = set(), set(), set()
    for secret in secrets:
        escaped = quote(secret, safe="", errors="backslashreplace")  # 大小写两种：下面不分大小写
        once = json.dumps(secret)[1:-1]
        these = {secret, " ".join(secret.split()), once, json.dumps(once)[1:-1], escaped}
        these.add(json.dumps(secret, ensure_ascii=False)[1:-1])
        starts |= {re.escape(form[:8]) for form in these if len(form) >= 8}
        alphabet |= set("".join(these))
        # key 里像 key 的一段不算整段：不然它先被遮住，截断了的 key 剩下的部分就露出来
        if not any(secret != other and secret in other for other in secrets):
            forms |= these
    whole = "|".join(map(re.escape, sorted(forms, key=len, reverse=True)))
    run = f"(?:{'|'.join(starts)})[{re.escape(''.join(alphabet))}]*" if starts else ""
    secret = re.compile("|".join(filter(None, (whole, run))) or r"(?!)", re.IGNORECASE)

    def mask(text: str) -> str:
        text = re.sub(r"\b([A-Za-z][\w+.-]*://)[^\s/@]+@", r"\1***@", secret.sub("***", text))
        return re.sub(TERMINAL_UNSAFE, lambda match: f"\\u{ord(match[0]):04x}", text)

    return mask


class SafeOutput:
    """包住 stdout/stderr：每个字先过遮罩；写不出去（管道关了、磁盘满了）就记下来。"""

    def __init__(self, stream: object, mask: object, flush_first: object = None, dumb=False):
        self.stream, self.mask, self.flush_first = stream, mask, flush_first
        self.failed, self.status_width, self.waits = stream is None, 0, 0
        self.erasable = not dumb and getattr(stream, "isatty", bool)()  # TERM=dumb 不认 \r

    def write(self, text: str) -> int:
        self.status("")
        getattr(self.flush_first, "flush", bool)()  # 先冲刷 stdout：2>&1 | tee 时行的先后才对
        text = self.mask(text.replace("\r\n", "\n"))  # 单独的 \r 才转义
        encoding = getattr(self.stream, "encoding", None) or "utf-8"
        self._try("write", text.encode(encoding, "backslashreplace").decode(encoding))
        return len(text)

    def flush(self) -> None:
        self._try("flush")

    def status(self, text: str) -> None:
        """等待时每秒一次的进度：终端上是一行临时状态，下一次输出前擦掉；接到文件、管道或不认 \r
        的终端时，每 10 次才写成一行，看得出是慢还是卡住了。"""
        self.waits = self.waits + 1 if text else 0
        if not self.erasable and self.waits and self.waits % 10 == 0:
            self._try("write", text + "\n")
        if self.erasable and (text or self.status_width):
            self._try("write", "\r" + " " * self.status_width + "\r" + text)
            self._try("flush")
            self.status_width = 2 * len(text)  # 中文字在终端里占两格

    def _try(self, method: str, *args: str) -> None:
        try:
            if not self.failed:
                getattr(self.stream, method)(*args)
        except (OSError, ValueError):  # 管道已关、磁盘已满、流已关闭
            self.failed = True


# ---- 响应：字节在一处变成响应；形状不合协议、要发回的字段发不回去，就停下并点名 ----
MAX_DEPTH = 32  # 一个回复嵌套不到 10 层；更深的，之后每一步（引用、回传、显示）都可能递归出错


def request_bytes(value: object) -> bytes:
    """SDK 发请求时的序列化（严格 JSON、UTF-8）：NaN、孤立的代理字符在这里就抛 ValueError。"""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def read_response(body: bytes) -> object:
    """HTTP 200 的字节在这里变成 SDK 的响应对象；不是要的 JSON，就说出它是什么（退出码 3）。"""
    from openai.types.chat import ChatCompletion

    start, hint = body.lstrip()[:6], "看服务端日志或中间的网关、代理；一直如此就换端点"
    try:
        text = body.decode("utf-8-sig")  # JSON 的标准允许开头的 BOM
        data = json.loads(text)
    except UnicodeDecodeError as error:  # 例如 GBK 编码的 JSON，或没有声明的压缩数据
        what = f"不是 UTF-8 文本（第 {error.start + 1} 个字节是 0x{body[error.start]:02x}）"
    except (ValueError, RecursionError) as error:
        what = f"不是完整的 JSON（{clip(str(error), 80)}）" if start else "是空的"
        if start.startswith((b"data:", b"event:")):
            what = "是事件流（data: …）：端点按流式回答了这个普通请求"
        if start.startswith(b"<"):
            what, hint = f"是一张网页：{quoted(text)}", HINT_PAGE
    else:
        brackets = re.sub(r'"(?:[^"\\]|\\.)*"|[^\[\]{}]', "", text)
        for _ in range(MAX_DEPTH):  # 每一遍去掉最里面的一层括号
            brackets = re.sub(r"\[\]|\{\}", "", brackets)
        what = f"嵌套超过 {MAX_DEPTH} 层，不是回复该有的样子" if brackets else ""
        if not what and isinstance(data, dict) and isinstance(data.get("choices"), list):
            with contextlib.suppress(AttributeError, TypeError):  # 键名撞上 SDK 的参数名时
                return ChatCompletion.construct(**data)
            what = "里有 SDK 读不了的键（如 _fields_set）"
        if not what:
            what = f"HTTP 200，响应体里没有 choices：{quoted(data)}"
            raise provider_stop(what, provider_words(data), 200)
    raise AgentStop(PROVIDER, f"HTTP 200，但响应体{what}", hint, EXIT_REQUEST_FAILED)


def check_response_shape(response: object) -> None:
    """choices[0] 不合 OpenAI 协议的形状，或要写进历史的字段发不回去：停下并点名是哪个字段。"""
    choices = getattr(response, "choices", None)
    if not isinstance(choices, list) or not choices:
        raise AgentStop(PROVIDER, "响应里没有 choices", HINT_ENDPOINT)
    said = getattr(choices[0], "error", None)
    if said:  # OpenRouter 把生成途中的错误放在这里
        what = f"Provider 在 choices[0].error 里报错：{quoted(said)}"
        raise provider_stop(what, provider_words(said), 200, EXIT_STOPPED)
    problem = field_problem(getattr(choices[0], "message", None))
    if problem:
        raise AgentStop(PROVIDER, f"响应没法照 OpenAI 协议读：{problem}", HINT_ENDPOINT)


def field_problem(message: object) -> str:
    """第一个缺了、类型不对或发不回去的字段，说出它的名字；都没问题是空串。"""
    if not (hasattr(message, "content") and hasattr(message, "tool_calls")):
        return "choices[0] 里没有 message"
    content = message.content
    parts = content if isinstance(content, list) else [{"type": "text", "text": content}]
    for number, part in enumerate(parts, start=1):  # 别的类型的片段（引用、推理）不算回答，也不挡路
        text = part.get("text") if isinstance(part, dict) and part.get("type") == "text" else ""
        if not isinstance(part, dict) or not isinstance(text, (str, type(None))):
            return f"content 的第 {number} 段不是文本：{clip(part, 80)}"
    if not isinstance(message.tool_calls, (list, type(None))):
        return f"tool_calls 是 {clip(message.tool_calls, 60)}，不是列表"
    for number, call in enumerate(message.tool_calls or [], start=1):
        where, function = f"第 {number} 个 Tool Call 的", getattr(call, "function", None)
        if getattr(call, "type", None) != "function":
            return f"{where} type 是 {shown_value(getattr(call, 'type', None))}，不是 function"
        for name in ("name", "arguments"):
            if not isinstance(getattr(function, name, None), str):
                return f"{where} function.{name} 是 {shown_value(getattr(function, name, None))}"
        if not isinstance(getattr(call, "id", None) or "", str):
            return f"{where} id 是 {shown_value(call.id)}，不是文本"
    reply = assistant_message_from_api(message)  # 要写进历史、下次照原样发回的那条消息
    fields = [(n, v) for n, v in reply.items() if n != "tool_calls"]
    for number, call in enumerate(reply.get("tool_calls", []), start=1):
        fields += [(f"第 {number} 个 Tool Call 的 {n}", v) for n, v in call.items()]
    for name, value in fields:
        try:
            request_bytes(value)
        except (ValueError, TypeError):
            return f"{name} 不能照原样发回（含 NaN、无穷大或孤立的代理字符）"
    return ""


# OpenAI 协议里的 finish_reason 的含义与建议；表外的值原样引用：它是这个 Provider 自己的说法
HINT_LENGTH = (
    "输出上限或上下文窗口：调大 max_tokens（llama-server 的 -n/--n-predict，Ollama 的 "
    "num_predict），或换上下文更大的模型、缩短问题"
)
FINISH_REASONS = {
    "length": (MODEL, "输出达到 Token 上限被截断", HINT_LENGTH),
    "content_filter": (PROVIDER, "内容被 Provider 过滤", HINT_POLICY),
    "tool_calls": (PROVIDER, "消息里却没有任何 Tool Call", HINT_ENDPOINT),
    "function_call": (PROVIDER, "OpenAI 已弃用的旧 functions 协议", HINT_ENDPOINT),
}
HINT_UNKNOWN = "照这个值的字面意思查 Provider 的文档；它说不出原因（null、空串）就换模型或端点"


def finish_reason_stop(finish_reason: object, with_tool_calls: bool) -> AgentStop:
    """finish_reason 不是自然结束时的 AgentStop：说出它的含义；有调用时说明一个都没执行。"""
    unknown = (PROVIDER, "不在 OpenAI 协议里，是这个 Provider 自己的值", HINT_UNKNOWN)
    link, meaning, hint = FINISH_REASONS.get(str(finish_reason), unknown)  # 值也可能是 [] 或 {}
    shown = clip(json.dumps(finish_reason, ensure_ascii=False, default=repr), 40)
    if with_tool_calls:
        what = f"有 Tool Call，但 finish_reason={shown}（{meaning}）：不可信，一个工具都没执行"
    else:
        what = f"模型没有正常结束：finish_reason={shown}（{meaning}），不能当成最终回答"
    return AgentStop(link, what, hint)


# 写成文字的调用，两条规则。一：回答里有聊天模板的控制标记，说明服务端没解析出调用（或漏出
# 了模板）：<|channel|>（gpt-oss）、<|tool_calls_section_begin|>（Kimi）、<|python_tag|>（Llama）、
# <｜tool▁calls▁begin｜> 与 <｜DSML｜（DeepSeek），和后面紧跟着调用的 <tool_call>（Qwen、GLM）、
# <minimax:tool_call>、<function=（Llama 3.1）、[TOOL_CALLS]（Mistral）；末尾的结束记号不算。
# 二：去掉推理块、一层代码围栏，整段是（或开头就是）写着函数名和参数的 JSON，或所给工具的
# name(...)。别的都是回答。各家标记的出处见 REFERENCE.md。
TEMPLATE_TOKEN = r"<\|[\w.:-]{1,40}\|>|<｜[^<>｜\n]{1,40}｜>?"
CALL_TAG = r"(?:<tool_call>|<minimax:tool_call>|<function=|\[TOOL_CALLS\])\s*"
CALL_TAG += r"(?:[\[{<]|[A-Za-z_][\w.:-]*\s*(?:<(?!/)|[>\[{(]))"  # 后面是调用，不是提到它的话
CALL_HEAD = r'\[?\s*\{\s*"(?:name|function)"\s*:\s*"[^"]*"\s*,\s*"(?:arguments|parameters)"\s*:'
HINT_CALL_AS_TEXT = (
    "让服务端把调用解析成 tool_calls：vLLM、SGLang 开 tool-call parser；llama.cpp 加 --jinja，"
    "模板要教对格式（Qwen2.5-Coder 用 templates/qwen2.5-coder-tools.jinja）；Ollama 选带 tools 的"
)


def reject_call_written_as_text(text: str) -> None:
    """回答其实是一个写成文字的调用（上面的两条规则）时停下；从不从文字里解析、执行它。"""
    if looks_like_tool_call_text(text):
        what = f"模型把调用写成了文字，端点没有把它变成 tool_calls：{clip(text, 120)}"
        raise AgentStop(PROVIDER, what, HINT_CALL_AS_TEXT)


def looks_like_tool_call_text(text: str) -> bool:
    body = re.sub(rf"(?:\s*(?:{TEMPLATE_TOKEN}|</tool_call>))+\s*\Z", "", text.strip())
    if re.search(f"{TEMPLATE_TOKEN}|{CALL_TAG}", body):
        return True
    fence = re.fullmatch(r"(```|~~~)[ \t]*[\w-]*[ \t]*\n(.*?)(?:\n?[ \t]*\1)?", body, re.S)
    body = fence[2].strip() if fence else body
    offered = "|".join(re.escape(tool["function"]["name"]) for tool in TOOLS)
    call = rf"(?:{offered})\s*\([^()]*\)"  # Llama 3.2、Gemma 的写法：[multiply(a=2, b=3)]
    if re.fullmatch(rf"\[?\s*{call}(?:\s*,\s*{call})*\s*\]?", body):
        return True
    braces = len(body) - len(body.lstrip("{"))  # 模板的 {{ }} 漏进回答时，多出的花括号不算
    try:
        value, end = json.JSONDecoder().raw_decode(body, max(braces - 1, 0))
    except (ValueError, RecursionError):  # 没写完的调用
        return re.match(CALL_HEAD, body[max(braces - 1, 0) :]) is not None
    if body[end:].strip("} \t\n"):  # JSON 后面还有别的文字：那是回答
        return False
    value = value.get("tool_calls", value) if isinstance(value, dict) and len(value) == 1 else value
    return all(map(is_written_call, value if isinstance(value, list) and value else [value]))


def is_written_call(value: object) -> bool:
    """{"name": …, "arguments": {…}}，或 OpenAI 的 {"type": "function", "function": …}。参数是一个
    JSON Schema（有 properties）的是工具定义，多出 description、result 之类键的也不是调用。"""
    inner = value.get("function") if isinstance(value, dict) else None
    value = inner if isinstance(inner, dict) and set(value) <= {"id", "type", "function"} else value
    names = {"name", "tool_name", "function"} & set(value) if isinstance(value, dict) else set()
    given = {"arguments", "parameters", "args"} & set(value) if names else set()
    if len(names) != 1 or len(given) != 1 or len(set(value) - {"id", "type"}) != 2:
        return False
    name, arguments = value[names.pop()], value[given.pop()]
    schema = isinstance(arguments, dict) and "properties" in arguments
    shaped = arguments is None or isinstance(arguments, dict) or str(arguments)[:1] == "{"
    return isinstance(name, str) and shaped and not schema


# ---- 请求失败：按 SDK 的异常类型和状态码分类；先引用 Provider 的原话，只在说得准时给建议 ----
HINT_WORDS = "按上面 Provider 的原话处理"
HINT_KEY = "检查 OPENAI_API_KEY：是否完整、没过期，是否属于 OPENAI_BASE_URL 那家 Provider（和地区）"
HINT_BALANCE = "余额、额度或免费额度用完了，或账户欠费：到 Provider 控制台充值或开通付费，或换 key"
HINT_MODEL = "检查 OPENAI_MODEL：与 Provider 模型列表一字不差、账户已开通；经网关时令牌要有权用它"
HINT_PATH = "检查 OPENAI_BASE_URL 的路径（多以 /v1 结尾；智谱 /api/paas/v4，火山方舟 /api/v3）"
HINT_NO_TOOLS = "换支持 tools 的模型或端点（vLLM 开自动工具选择，llama.cpp 加 --jinja）；不用改工具"
HINT_THINKING = "这个模型思考时只收流式请求，本课发普通请求：换个不思考的模型（README 每家都列了）"
HINT_REGION = "这家 Provider 不向你所在的地区提供服务：换一家（README 里有国内的）"
HINT_RATE = "触发了频率、并发或用量限制：稍等再试；一直如此就查 Provider 控制台里的限额"
HINT_PAGE = "OPENAI_BASE_URL 多半指向了网页而不是 API：照 Provider 文档填 API 的地址"
STATUS_HINTS = {401: HINT_KEY, 402: HINT_BALANCE, 429: HINT_RATE}  # 各家含义一致的状态码
# 状态码会误导时才认字样：这些说法在哪个状态码下都只有一个意思（余额用完也会回 400、403、429，key
# 错了也会回 400）。每行的真实错误体、不该命中的近似说法与出处，在 tests/test_provider_errors.py
PHRASES = [
    (r"does not support tools|param:? tools|tools param|tool choice requires", HINT_NO_TOOLS),
    (r"support tool use|not support function call", HINT_NO_TOOLS),
    (r"enable.thinking|only support stream", HINT_THINKING),
    (r"unsupported country|territory not supported", HINT_REGION),
    (r"insufficient (balance|quota)|balance is insufficient|current quota", HINT_BALANCE),
    (r"paid balance|arrearage|overdue|good standing|free tier|余额不足|欠费|额度", HINT_BALANCE),
    (r"bind your", HINT_WORDS),  # 魔搭的 401：先去绑定阿里云账号，不是 key 错了
    (r"api.?key (not valid|is invalid)|incorrect api.?key|invalid (api.?key|token)", HINT_KEY),
    (r"token invalid", HINT_KEY),  # 百度在 HTTP 200 里说 Access token invalid
    (r"model\b.{0,60}(does not exist|not found)|not found the model", HINT_MODEL),
    (r"not activated the model|endpoint that does not exist|not supported for format", HINT_MODEL),
    (r"无可用渠道|模型不存在|无权(使用|访问)模型", HINT_MODEL),
]
WORDS = r'"(?:message|msg|error_msg|status_msg|detail|error|raw)": "((?:[^"\\]|\\.)*)"'


def provider_words(body: object) -> str:
    """Provider 的原话：错误体里给人看的话，不论信封（error.message、message、msg、error_msg、
    base_resp.status_msg、detail、一段文字；OpenRouter 在 metadata.raw 里附上游的原话）。
    网页取标题。返回的原话最多 4000 个字符：认字样用整段，引用时才截短。"""
    if isinstance(body, str) and body.lstrip()[:1] in ("{", "["):
        with contextlib.suppress(ValueError, RecursionError):
            body = json.loads(body)
    if isinstance(body, str):
        page = body[:4000]  # 只看开头：找标题的工作量有上限
        title = re.search(r"(?is)<title>(.*?)(?:</title>|$)", page)
        words = " ".join(re.sub(r"<[^<>]*(>|$)", " ", title[1] if title else page).split())
        return "" if "\ufffd" in words else words
    said = [json.loads(f'"{text}"') for text in re.findall(WORDS, json.dumps(body, default=repr))]
    said = [provider_words(text) if text.lstrip()[:1] in ("{", "[") else text for text in said[:3]]
    words = clip("：".join(dict.fromkeys(text for text in said if text.strip())), 4000)
    return "" if "\ufffd" in words else words  # 替换字符：原来的字节不是 UTF-8，读不出原话


def quoted(body: object) -> str:
    """报告里引用的原话；没有话可引时，说出响应体是什么样子。"""
    words = provider_words(body)
    if "\ufffd" in str(body):  # SDK 读错误体时把不是 UTF-8 的字节换成了替换字符
        return "（响应体不是 UTF-8 文本）"
    if words or not isinstance(body, str):
        return clip(words or body)
    return f"（{len(body)} 个字符的响应体里没有可读的文字）" if body.strip() else "（响应体是空的）"


def provider_stop(what: str, words: str, status: int, exit_code: int = EXIT_REQUEST_FAILED):
    """what 已引用了原话。只有一个意思的说法按说法给建议；否则按含义一致的状态码（404 看原话提没提
    模型）；都不是就请人照原话办，没有原话就请人看服务端日志。"""
    said = re.sub(r"%20|[\s_]+", " ", words.lower())
    hint = next((hint for pattern, hint in PHRASES if re.search(pattern, said)), None)
    if hint is None and status == 404:
        hint = HINT_MODEL if "model" in said else HINT_PATH
    hint = hint or STATUS_HINTS.get(status) or (HINT_WORDS if words else "看服务端日志，或换端点")
    link = MODEL if hint in (HINT_NO_TOOLS, HINT_THINKING) else PROVIDER  # 是模型本身做不到
    return AgentStop(link, what, hint, exit_code)


HINT_LOCAL = "本地服务（Ollama、llama.cpp、vLLM）用 http://，不是 https://"
HINT_PROXY = (  # Clash、V2Ray 常给 socks5:// 代理，httpx 要多装 socksio 才能用
    "检查 {name}：代理是否在运行、地址（普通代理用 http://，socks5:// 要 python -m pip install "
    "socksio）、端口和认证；本机或内网端点加进 NO_PROXY（如 127.0.0.1,localhost）"
)


def explain_request_failure(error: BaseException, base_url: str, proxy: tuple) -> AgentStop | None:
    """SDK 报告的失败按它的异常类型和状态码变成 AgentStop；别的异常返回 None：那是 bug。类型分不出
    该做哪件事时（连不上还是中途断开、证书还是端口说 http），才看异常链里的原因。"""
    import ssl

    import openai

    http = sys.modules[openai.DefaultHttpxClient.__mro__[1].__module__]
    if isinstance(error, openai.APIStatusError):
        body = error.body if error.body is not None else error.response.text
        what = f"HTTP {error.status_code}：{quoted(body)}"
        if proxy and error.status_code in (407, 502):  # 有代理时，407、502 多是代理自己的回答
            return through_proxy(what, proxy)
        return provider_stop(what, provider_words(body), error.status_code)
    if not isinstance(error, openai.APIConnectionError):  # 超时 APITimeoutError 是它的子类
        return None
    causes = [error]
    while len(causes) < 10 and (causes[-1].__cause__ or causes[-1].__context__) is not None:
        causes.append(causes[-1].__cause__ or causes[-1].__context__)
    certificate = "设了 SSL_CERT_FILE、SSL_CERT_DIR 就检查它们；公司网络可能有中间人证书"
    rows = [  # 异常链里有这种原因 -> 原因、建议、是否在连接的第一跳（有代理时那就是代理）
        (ssl.SSLCertVerificationError, "TLS 证书校验失败", certificate, True),
        (ssl.SSLError, "TLS 握手失败：这个端口说的多半是 http", HINT_LOCAL, True),
        (http.ProxyError, "代理拒绝转发这个请求", "检查代理的地址和认证", True),
        (http.ConnectTimeout, "几秒内没能建立连接", f"检查地址和端口；{HINT_LOCAL}", True),
        (http.ConnectError, "连不上服务器", "检查端点的地址、端口和服务是否已启动", True),
        (http.TooManyRedirects, "重定向循环", "用 curl -I 看 OPENAI_BASE_URL 跳到哪", False),
        (http.TimeoutException, "请求超时", "本地模型慢就调大 OPENAI_TIMEOUT（秒）", False),
        (Exception, "连上了服务器，但响应中途断开或无法解码", "看服务端日志和中间的代理", False),
    ]
    row = next(row for row in rows if any(isinstance(cause, row[0]) for cause in causes))
    kind, reason, hint, first_hop = row
    if kind is http.ConnectTimeout and re.match(r"https://(localhost|127\.|\[::1\])", base_url):
        reason = "几秒内没完成 TLS 握手：这个本机端口说的多半是 http"  # llama-server 对握手不作声
    what = f"{reason}（{type(error).__name__}: {clip(str(error.__cause__ or error), 120)}）"
    if proxy and first_hop:
        return through_proxy(what, proxy)
    return AgentStop(SDK_NETWORK, what, hint, EXIT_REQUEST_FAILED)


def through_proxy(what: str, proxy: tuple) -> AgentStop:
    what = f"请求没能经代理 {proxy[1]}（{proxy[0]}）送到端点：{what}"
    unset = f"，或 unset {proxy[0]}" if proxy[0].isascii() else ""  # 系统代理设置不是变量
    return AgentStop(SDK_NETWORK, what, HINT_PROXY.format(name=proxy[0]) + unset, 3)


class OnlineClient:
    """SDK 客户端外面的一层，形状同它（.chat.completions.create）。请求在后台线程里跑，主线程只等到
    整次请求（含重试）的期限：OPENAI_TIMEOUT 只限每次读 socket，每秒滴一个字节的服务器能拖上几分钟。
    等的时候每秒告诉 progress；SDK 的失败和 HTTP 200 的字节，都在这里变成 AgentStop 或响应。"""

    def __init__(self, client: object, config: dict, proxy: tuple, progress: object):
        self.client, self.config, self.proxy, self.progress = client, config, proxy, progress
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self.create))

    def create(self, **request: object) -> object:
        import threading
        from concurrent.futures import Future, wait

        outcome, seconds = Future(), self.config["deadline"]

        def call() -> None:
            try:  # 要的是响应体的字节：它们在 read_response 里才变成响应
                outcome.set_result(self.client.chat.completions.with_raw_response.create(**request))
            except Exception as error:
                outcome.set_exception(error)

        threading.Thread(target=call, daemon=True).start()  # 不用线程池：它退出时要等线程
        for waited in range(1, int(seconds) + 2):  # 每秒醒来一次，报告已经等了几秒
            if wait([outcome], min(1.0, seconds - waited + 1)).done:
                break
            self.progress(f"…等待响应 {waited} 秒（Ctrl-C 可中断）")
        self.progress("")  # 步骤行写在 stdout 上：返回之前先擦掉
        if not outcome.done():
            what = f"请求超时：整次请求（含重试）超过 {seconds:g} 秒仍未完成"
            hint = "慢或限流（SDK 可能在按 Retry-After 等待重试）：稍后再试，或调大 OPENAI_TIMEOUT"
            raise AgentStop(SDK_NETWORK, what, hint, EXIT_REQUEST_FAILED)
        error = outcome.exception()
        if error is not None:
            raise explain_request_failure(error, self.config["base_url"], self.proxy) or error
        return read_response(outcome.result().content)


# ---- 环境：依赖的变量只读一次；每个变量照它自己的样子查，说出人犯的是哪一种错 ----
CONNECT_SECONDS = 5.0  # 与 SDK 自己的默认连接期限相同
DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_TIMEOUT_SECONDS, MAX_TIMEOUT_SECONDS = 60.0, 3600.0  # SDK 默认等 10 分钟，学习时太久
MAX_RETRIES = 1  # SDK 默认重试 2 次；配置错误（如 500 Unsupported param）重试也没用
VARIABLES = ("OPENAI_API_KEY", "OPENAI_MODEL", "OPENAI_BASE_URL", "OPENAI_TIMEOUT")
REQUIRED = {
    "OPENAI_API_KEY": "本地服务不校验 key，可填 local",
    "OPENAI_MODEL": "支持 Tool Calling 的模型名",
}
OLD_NAMES = {"OPENAI_API_BASE": "OPENAI_BASE_URL"}  # openai<1.0 与 LangChain 读的旧名字
# 像 key 的一段：sk-…、gsk_…、xai-…、AIza…、JWT、32 位以上的字母数字（智谱）、UUID
KEY_LIKE = re.compile(
    r"\b(?:sk|gsk|xai)[-_][\w-]{8,}|\bAIza[\w-]{20,}|\beyJ[\w-]{10,}\.[\w.-]+|[A-Za-z0-9]{32,}"
    r"|\b[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}\b"
)
# 每个变量的值能是什么样子。地址、API Key 出现在别的变量里，多半是两个变量填反了
SHAPES = {"OPENAI_API_KEY": "API Key 名字 秒数", "OPENAI_MODEL": "名字 秒数"}
SHAPES |= {"OPENAI_BASE_URL": "地址", "OPENAI_TIMEOUT": "秒数"}
OWNERS = {"地址": "OPENAI_BASE_URL", "API Key": "OPENAI_API_KEY", "名字": "OPENAI_MODEL"}
HINT_URL = "只写协议、主机、端口和路径，照 Provider 文档写，例如 http://127.0.0.1:11434/v1"


def read_environment(environ: dict) -> dict:
    """这次运行依赖的全部变量，只在这里读一次：OPENAI_*（课文的四个，和 SDK 自己会读的）、代理、
    证书（SDK 的 HTTP 库会读它们；出了错，报告要说出是哪个变量）、TERM（终端认不认 \r）。"""
    wanted = re.compile(r"(?i)openai_\w+|\w+_proxy|ssl_cert_(?:file|dir)|sslkeylogfile|TERM")
    return {name: value for name, value in environ.items() if wanted.fullmatch(name)}


def shape_of(value: str) -> str:
    if re.match(r"(?i)https?://", value):
        return "地址"
    if KEY_LIKE.search(value):
        return "API Key"
    return "秒数" if re.fullmatch(r"\d+\.?\d*|\.\d+", value) else "名字"


def config_error(what: str, hint: str) -> AgentStop:
    return AgentStop(HARNESS, what, hint, EXIT_USAGE)


def check_config(environment: dict) -> dict:
    """在发出任何请求之前，把缺的、填错的变量说清楚（退出码 2）；返回之后用到的全部值。"""
    import difflib

    value = {name: environment.get(name, "").strip() for name in VARIABLES}
    others = {n.upper(): n for n, v in environment.items() if n not in VARIABLES and v.strip()}
    for name in [name for name in VARIABLES if not value[name]]:
        near = [n for n in others if OLD_NAMES.get(n) == name]  # 旧名字、小写、拼错的名字
        near += difflib.get_close_matches(name, [n for n in others if "OPENAI" in n], 1, 0.8)
        if near:
            what = f"没有设 {name}，设着的却是 {others[near[0]]}：脚本不读它"
            raise config_error(what, f"改成 {name} 这个名字：export {name}=...")
        if name in REQUIRED:
            raise config_error(f"缺少环境变量 {name}", f"export {name}=...（{REQUIRED[name]}）")
    if "OPENAI_CUSTOM_HEADERS" in others:  # SDK 会读它，把里面的头（甚至别人的 key）随请求发出
        what = "设着 OPENAI_CUSTOM_HEADERS：SDK 会把其中的每个头随请求发给这个端点"
        raise config_error(what, "本课不用它：unset OPENAI_CUSTOM_HEADERS")
    for name in VARIABLES:
        problem = config_problem(name, value) if value[name] else ()
        if problem:
            hidden = name == "OPENAI_API_KEY" or KEY_LIKE.search(value[name])
            echoed = "" if hidden else f"（{clip(value[name], 120)}）"
            raise config_error(f"{name} 不可用{echoed}：{problem[0]}", problem[1])
    timeout = float(value["OPENAI_TIMEOUT"] or DEFAULT_TIMEOUT_SECONDS)
    return {
        "api_key": value["OPENAI_API_KEY"],
        "model": value["OPENAI_MODEL"],
        "base_url": value["OPENAI_BASE_URL"] or DEFAULT_BASE_URL,  # 显式给出：SDK 就不读环境
        "base_url_given": bool(value["OPENAI_BASE_URL"]),
        "timeout": timeout,
        "deadline": timeout * (MAX_RETRIES + 1) + 1,  # 每次尝试一个 timeout，再留一秒余量
        "environment": environment,
    }


def config_problem(name: str, values: dict) -> tuple:
    """一个变量的检查：先认人常犯的错，再看它是不是别的变量的样子，最后是它自己的规则。
    返回 (错在哪, 怎么改)；没有错是 ()。"""
    import unicodedata

    value = values[name]
    if re.fullmatch(r"""["'“‘].*["'”’]""", value, re.S):
        return "两边带着引号（多半是从 .env 文件连引号一起复制的）", "去掉两边的引号"
    if re.fullmatch(r"\$\{?[A-Za-z_]\w*\}?|%[A-Za-z_]\w*%", value):
        name = value.strip("${}%")  # 整个值可能被当成 key 遮住，名字单独说
        return f"是没展开的变量 {name}", "单引号里的 $X 不展开：改用双引号，并确认它已 export"
    if re.search(r"\.\.\.|…|<[^<>]*>|\byour[-_]|provider\.example", value):
        return "还是 README 或课文里的占位符", "换成你自己的真实值"
    if name == "OPENAI_API_KEY" and re.match(r"(?i)bearer\s", value):
        return "开头多了 Bearer（SDK 会自己加）", "删掉 Bearer 和空格，只留 key"
    # key、地址、秒数只能是 ASCII（key 还要放进 HTTP 头）；模型名在请求体里，别的文字也可以
    ascii_only = name != "OPENAI_MODEL"
    odd = [
        i
        for i, c in enumerate(value)
        if c.isspace() or not c.isprintable() or (ascii_only and not c.isascii())
    ]
    char = value[odd[0]] if odd else ""
    where, half = f"第 {odd[0] + 1 if odd else 0} 个字符", unicodedata.normalize("NFKC", char)
    if char.isspace():
        return f"{where}是空白 {json.dumps(char)}", "删掉它（Windows 上存 .env 要用 LF 换行）"
    if char and half.isascii() and half.isprintable():
        return f"{where}是全角的「{char}」", f"换成半角的「{half}」（输入法切到英文再打）"
    if char:
        return f"{where} {json.dumps(char)} 不是 ASCII", "重新输入，只用英文字母、数字和符号"
    shape = shape_of(value)
    owner = OWNERS.get(shape, "OPENAI_TIMEOUT")
    theirs = shape_of(values[owner]) if values[owner] else ""
    if shape not in SHAPES[name] and theirs in SHAPES[name] and theirs not in SHAPES[owner]:
        return f"像 {owner} 的值", f"{name} 和 {owner} 填反了：把两个值对调"
    if shape in ("地址", "API Key") and shape not in SHAPES[name]:
        said = "（没有打印它）" if shape == "API Key" else ""
        return f"像一个{shape}{said}", f"{name} 和 {owner} 可能填反了：{shape}只放 {owner}"
    seconds = float(value) if shape == "秒数" else 0.0
    if name == "OPENAI_TIMEOUT" and not 0 < seconds <= MAX_TIMEOUT_SECONDS:
        return f"要是 0 到 {MAX_TIMEOUT_SECONDS:.0f} 之间的秒数", "例如 export OPENAI_TIMEOUT=60"
    problem = base_url_problem(value) if name == "OPENAI_BASE_URL" else ""
    return (problem, HINT_URL) if problem else ()


def base_url_problem(url: str) -> str:
    """地址里 SDK 会悄悄改写或误用的部分：协议、端口、查询参数、用户名密码、完整的接口路径。"""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  端口越界或不是数字时，这里抛 ValueError
    except ValueError:
        return "地址无法解析（端口要是 1–65535 之间的数字）"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "要以 http:// 或 https:// 开头，并写明主机"
    if "@" in parts.netloc:
        return "地址里不能写用户名或密码：SDK 会改用它们认证，key 就不再生效"
    if parts.query:
        return "地址里不能带 ?查询参数：SDK 会把 /chat/completions 拼在它后面"
    if parts.path.rstrip("/").endswith("/chat/completions"):
        return "写到 /chat/completions 之前为止，SDK 会自己拼上它"
    return ""


def proxy_for(config: dict, http: object) -> tuple | None:
    """这个端点走的代理，由 SDK 的 HTTP 库自己的函数决定：(设它的变量, 代理地址)，() 是不走代理；
    这个版本的库没有这些函数时返回 None：交给 SDK 自己决定，照样运行。"""
    utils = getattr(http, "_utils", None)
    if not (hasattr(utils, "get_environment_proxies") and hasattr(utils, "URLPattern")):
        return None
    mounts = utils.get_environment_proxies()
    patterns = sorted(map(utils.URLPattern, mounts))  # 与库挑选 mount 的顺序相同
    chosen = next((p.pattern for p in patterns if p.matches(http.URL(config["base_url"]))), None)
    if not (chosen and mounts[chosen]):
        return ()
    scheme, environment = chosen[: -len("://")], config["environment"]
    names = [n for n in (f"{scheme}_proxy", f"{scheme.upper()}_PROXY") if environment.get(n)]
    return (names or ["系统代理设置"])[0], mounts[chosen]


def make_client(config: dict, progress: object) -> OnlineClient:
    """创建 SDK 客户端：key、地址、期限、代理都由脚本给定，SDK 不再替它们读环境。"""
    try:
        import openai
        from openai import OpenAI  # noqa: F401  脚本旁边同名的 openai.py 里没有它
    except ImportError as error:
        missing = isinstance(error, ModuleNotFoundError) and error.name == "openai"
        what = "没有安装 openai SDK" if missing else f"openai SDK 导入失败：{clip(str(error))}"
        raise config_error(what, HINT_INSTALL) from None
    http = sys.modules[openai.DefaultHttpxClient.__mro__[1].__module__]
    # 组织、项目是 OpenAI 自己的概念：SDK 会自己读 OPENAI_ORG_ID、OPENAI_PROJECT_ID，告诉它不发
    headers = {"OpenAI-Organization": openai.Omit(), "OpenAI-Project": openai.Omit()}
    timeout = openai.Timeout(config["timeout"], connect=min(config["timeout"], CONNECT_SECONDS))
    options = {"timeout": timeout, "max_retries": MAX_RETRIES, "default_headers": headers}
    try:
        proxy, options["http_client"] = proxy_for(config, http), None
        if proxy is not None:  # 只走选定的代理：用不上的（比如没装 socksio 的 socks5://）不碍事
            transport = http.HTTPTransport(proxy=proxy[1] if proxy else None)  # 证书仍照环境
            options["http_client"] = openai.DefaultHttpxClient(transport=transport, trust_env=False)
        client = openai.OpenAI(api_key=config["api_key"], base_url=config["base_url"], **options)
    except (OSError, ImportError, ValueError, http.InvalidURL) as error:  # 证书、代理、地址
        what = f"SDK 没能用这台机器的设置创建客户端（{type(error).__name__}: {clip(str(error))}）"
        named = "、".join(n for n in config["environment"] if re.match(r"(?i)ssl|\w+_proxy", n))
        hint = f"检查 {named}：文件在不在、代理能不能用（socks5:// 要 pip install socksio）"
        raise config_error(what, f"{hint}；或 unset 它们" if named else HINT_URL) from None
    return OnlineClient(client, config, proxy or (), progress)


HINT_INSTALL = (
    "先激活 README 第 2 步建的虚拟环境（. .venv/bin/activate，Windows 是 .venv\\Scripts\\"
    'Activate.ps1），或在其中 pip install "openai>=1.109.1,<4"；脚本旁边若有自己写的 openai.py '
    "或 openai/，给它改个名字"
)


# ---- 命令行：解析参数、运行，把 AgentStop 变成两行说明和退出码；别的异常是 bug ----
HELP = """\
用法：python3 lesson_03_tool_calling_loop.py [--show-messages] [问题……] | --self-check | --demo
  --self-check     离线自检：只用标准库，不需要 API Key
  --demo           离线演示：用预设的响应跑真正的 run_agent，不需要 API Key
  --show-messages  结束后（失败时也一样）把消息历史打印成 JSON
  问题             默认“帮我算一下 248 乘以 15”；几个词会连成一句；-- 之后的都算问题
在线运行读取的环境变量（每家 Provider 怎么填，见 README）：
  OPENAI_API_KEY   必填；本地服务（Ollama、llama.cpp）不校验，填 local 即可
  OPENAI_MODEL     必填；支持 Tool Calling 的模型名
  OPENAI_BASE_URL  第三方或本地端点才要；不设就是 https://api.openai.com/v1
  OPENAI_TIMEOUT   每次读取的超时秒数，默认 60
退出码：0 打印了回答（Loop 正常结束，不保证答对）；1 Loop 被停下（或自检失败、程序自身出错）；
        2 用法或配置错误；3 请求失败；4 回答没能写到标准输出；130 按了 Ctrl-C"""
OPTIONS = ("--self-check", "--demo", "--show-messages", "--help", "-h")
DASHES = "\u2010-\u2015\u2212\ufe58\ufe63\uff0d"  # 中文输入法打出的各种破折号、全角的减号


def parse_args(argv: list) -> tuple:
    """返回 (选项, 问题, 用法错误)。像 -x、--word 的才是选项，"-7 乘以 6" 仍是问题。"""
    import difflib

    end = argv.index("--") if "--" in argv else len(argv)  # -- 之后的都是问题
    options = [arg for arg in argv[:end] if re.fullmatch(r"--?[A-Za-z][\w-]*(=.*)?", arg)]
    words = [arg for arg in argv[:end] if arg not in options] + argv[end + 1 :]
    question, unknown = " ".join(words).strip(), [o for o in options if o not in OPTIONS]
    unknown += [w for w in words if re.fullmatch(f"[{DASHES}]+[A-Za-z][\\w-]*", w)]
    if unknown:
        meant = re.sub(f"^[{DASHES}]+", "--", unknown[0]).split("=")[0]
        guess = "".join(f"，是不是 {g}？" for g in difflib.get_close_matches(meant, OPTIONS, 1))
        return options, question, f"不认识的选项：{clip(unknown[0], 80)}{guess}"
    if {"--self-check", "--demo"} & set(options) and (words or len(set(options)) > 1):
        return options, question, "--self-check 和 --demo 只跑本地代码，不带问题或其他选项"
    if words and not question:
        return options, question, "问题是空的"
    try:
        request_bytes(question)  # 终端编码不对时，问题里会混进发不出去的字符
    except ValueError:
        return options, question, "问题里有无法按 UTF-8 发送的字符，检查终端编码"
    return options, question or DEFAULT_QUESTION, ""


def run_command(argv: list, environment: dict, progress: object) -> int:
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
        config = check_config(environment)
        client = make_client(config, progress)
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
            print(f"被拒收、没有写进历史的响应（Harness 停下的原因就在这里）：\n{as_json(refused)}")


def report(stop: AgentStop, config: dict, messages: list, file: object = None) -> None:
    """两行：哪一环、第几步、原因（端点的问题还写明端点和模型）；最后一个成功事件和建议。最后一个
    成功事件从历史推出：收到却拒收的响应、最后写进的 Tool Result，或刚写进的 user 消息。"""
    endpoint, last_ok = "", "Harness 已就绪，user 消息已写入历史"
    if stop.link != HARNESS and config:
        default = "" if config["base_url_given"] else "（没设 OPENAI_BASE_URL 时的默认值）"
        endpoint = f"；端点 {config['base_url']}{default}，模型 {clip(config['model'], 80)}"
    if messages and messages[-1]["role"] == "tool":
        last_ok = f"{clip(messages[-1]['tool_call_id'], 80)} 的 Tool Result 已写入历史"
    last_ok = f"step {stop.step}: 收到响应" if stop.refused is not None else last_ok
    last_ok = f"最后一个成功事件：{last_ok}；" if messages else ""
    where = f"step {stop.step}: " if stop.step else ""
    text = f"[{stop.link}] {where}{stop.reason}{endpoint}\n{last_ok}建议：{stop.hint}"
    print(text, file=file or sys.stderr)


def main(argv: list, environ: dict) -> int:
    """命令行入口，返回退出码。输出都经过 SafeOutput；回答没写出去就不算成功。"""
    environment = read_environment(environ)
    mask = secret_mask(secrets_in(environment))
    saved = (sys.stdout, sys.stderr)
    out = SafeOutput(sys.stdout, mask)
    err = SafeOutput(sys.stderr, mask, out, dumb=environment.get("TERM") == "dumb")
    sys.stdout, sys.stderr = out, err
    try:
        code = run_command(argv, environment, err.status)
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
