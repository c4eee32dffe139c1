# /// script
# requires-python = ">=3.9"
# dependencies = ["openai>=1.109.1,<4"]
# ///
"""第 3 课：跑通第一个 OpenAI-compatible Tool Calling Agent Loop（课文的可执行版本）。

一次 Turn 是从用户提问到最终回答的一轮；课文的例子里它有四条消息（多几次调用就多几条）：
user -> assistant(tool_calls) -> tool(tool_call_id, result) -> assistant(final)

第一部分是课文（§1–§7，编号与课文相同），第二部分是自检和演示，第三部分收着真实世界需要、
却不是本课主题的防护（翻译失败、检查配置、文字与终端安全）。读到第三部分之前，整课就已读完。
用法见 --help；没有 API Key 也能用 --demo 看 Loop 真跑一遍。
"""

from __future__ import annotations

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
# 这是普通的 Tool Calling Loop：“调用工具再接着回答”本身不能证明用了 ReAct（ReAct 论文要求
# 推理轨迹与动作交错生成，只看 Loop 的形状看不出来）。
DEFAULT_QUESTION = "帮我算一下 248 乘以 15"


# ---- §2 不要让模型控制 eval() ----
# 模型写出的字符串受用户输入和它读到的内容摆布。eval() 执行的是任意 Python 代码：一句
# __import__("os").system(...) 就能读文件、导入模块、启动进程。所以工具只收两个整数这样的数据，
# 要做的运算由 Python 写死。
MAX_ABS_VALUE = 1_000_000


def multiply(a: int, b: int) -> int:
    """两个整数相乘；拒绝 bool、小数、字符串和超出范围的值。"""
    for name, value in (("a", a), ("b", b)):
        # bool 是 int 的子类（isinstance(True, int) 为真）：不先排除，True 会被悄悄当成 1
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{name} 必须是整数，收到的是{json_type_name(value)}")
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
    """Router：校验一个 Tool Call 并执行 multiply，返回紧凑 JSON，从不抛异常。

    参数填错只是这一单错了：{"status":"error"} 作为 Tool Result 交回模型，让它改正后再来。
    """
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
# MAX_STEPS 限的是发给模型的请求次数（不是消息条数），保证花费和时间有个尽头；
# 至于模型为什么停不下来（反复调用、工具总报错、提示里没写何时收手），它不管，要另外查。
# 第 MAX_STEPS 次请求若仍要调用工具：工具照常执行、结果写进本地历史，但不会再有请求把它带给模型。
MAX_STEPS = 8
MAX_TOOL_CALLS = 32  # 失常的响应不该触发无界的工作；真实 Provider 的并行调用远少于此
# 调用链上的四环（§6 用它们排查）；Tool 这一环的错误不停 Loop，见 execute_tool
HARNESS, SDK_NETWORK, PROVIDER, MODEL = "Harness", "SDK/网络", "Provider", "Model"


class AgentStop(Exception):
    """让 Loop 停下的唯一异常。

    失败分两种：工具参数填错是数据，作为 Tool Result 交回模型，Loop 照常继续；协议状态不可信
    （缺 id、调用被截断、字段互相矛盾）时谁也不能替 Provider 猜，就抛 AgentStop 停下整个 Loop。
    它带着失败的一环（link）、原因和建议；run_agent 补上第几步、最后一个成功事件，以及被拒收、
    因而没写进历史的那条回复（refused）。
    """

    def __init__(self, link: str, reason: str, hint: str, exit_code: int = EXIT_STOPPED):
        super().__init__(reason)
        self.link, self.reason, self.hint, self.exit_code = link, reason, hint, exit_code
        self.step, self.last_ok, self.refused = None, "", None


# Provider 自己的不透明字段：它要求原样带回才肯接着这一轮（否则 HTTP 400），所以只在它们来了时、
# 原样回传这几个；别的私有字段一律不回传（Groq 就拒收回传的 reasoning），也从不打印。
# reasoning_content：DeepSeek、Kimi；reasoning_details：OpenRouter；extra_content：Gemini 3 的签名
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


# 推理块：开头的 <think>…</think>（模板把 <think> 写进提示时只剩 …</think>；没写完也算）
THINK_BLOCKS = re.compile(r"^(?:\s*(?:<think>)?(?:(?!<think>).)*?</think>)+|^\s*<think>.*", re.S)


def final_answer(message: object) -> str:
    """finish_reason=stop 也可能不是回答：拒答、空回答、把工具调用写成了文字。返回要打印的回答。"""
    if getattr(message, "refusal", None):
        raise AgentStop(MODEL, f"模型拒绝回答：{clip(message.refusal)}", HINT_REFUSAL)
    # 开头的推理块是推理，不是回答：原样留在历史里，但不打印
    text = THINK_BLOCKS.sub("", message.content or "", count=1).lstrip()
    if not any(char.isprintable() and not char.isspace() for char in text):  # 零宽字符也看不见
        raise AgentStop(MODEL, "模型返回了空回答", HINT_EMPTY_ANSWER)
    # 回答的开头或结尾就是一个调用（模板标记、写着函数名和参数的 JSON 或代码块），说明端点没把它
    # 解析成 tool_calls。Harness 只报告，从不从文字里解析、执行调用：那等于替 Provider 猜
    if looks_like_tool_call_text(text):
        what = f"模型把调用写成了文字（或模板标记），端点没有把它变成 tool_calls：{clip(text, 120)}"
        raise AgentStop(PROVIDER, what, HINT_CALL_AS_TEXT)
    return text


# 同一个 choice 的两个字段必须一致：message.tool_calls 说 Model 要调用什么，finish_reason 说
# Provider 为什么停止生成：stop 自然结束；tool_calls 停下来等工具结果；length 撞上 Token 上限
# 被截断；content_filter 被内容过滤。截断或过滤的生成里，调用的 arguments 可能只写了一半，绝不执行。
# stop 配 Tool Call 却是无害的常见行为（OpenAI 在 tool_choice 指定函数时就这样回，Gemini、SGLang
# 也常见）：生成是自然结束的，每个调用照样要过 id、type、JSON 和 Router 的检查，所以照常执行。
# 与课文片段不同：stop 配 Tool Call 照常执行（课文的片段会停下）；回复先过全部检查才写入
# 历史（被拒收的不留下，只挂在 AgentStop.refused 上给人看）；空回答、拒答、写成文字的调用
# 不算 Final：它们没有回答问题。


def run_agent(client: object, model: str, user_text: str, messages: list | None = None) -> str:
    """最多发 MAX_STEPS 次模型请求，返回最终回答；传入 messages 可在外面看到历史。"""
    messages = [] if messages is None else messages
    messages.append({"role": "user", "content": user_text})
    step, last_ok, reply = 0, "Harness 已就绪，user 消息已写入历史", None
    try:
        for step in range(1, MAX_STEPS + 1):
            try:
                response = client.chat.completions.create(
                    model=model, messages=messages, tools=TOOLS
                )
            except Exception as error:  # 连接、超时、HTTP 错误都从 SDK 这里抛出
                raise explain_request_failure(error) from None
            last_ok = f"step {step}: 收到 HTTP 响应"
            check_response_shape(response)  # 缺字段、不是文本的响应没法原样回传，也没法交给 Router
            choice = response.choices[0]
            message, finish_reason = choice.message, getattr(choice, "finish_reason", None)
            tool_calls, reply = message.tool_calls or [], assistant_message_from_api(message)
            print(f"step {step}: finish_reason={shown_value(finish_reason)}")
            if not tool_calls:
                if finish_reason != "stop":  # length、content_filter、空的 tool_calls 都不是 Final
                    raise explain_finish_reason(finish_reason, with_tool_calls=False)
                answer = final_answer(message)
                messages.append(reply)
                return answer
            # 有 Tool Call 时只认两种自然结束；length、content_filter 截下的参数可能只有一半
            if finish_reason not in ("tool_calls", "stop"):
                raise explain_finish_reason(finish_reason, with_tool_calls=True)
            ids = [getattr(call, "id", None) for call in tool_calls]
            if not all(ids) or len(set(ids)) < len(ids):  # 缺 id 或重复，结果就无法配对
                raise AgentStop(PROVIDER, "Tool Call 缺少 id 或 id 重复", HINT_ENDPOINT)
            if len(tool_calls) > MAX_TOOL_CALLS:
                raise AgentStop(HARNESS, f"一次要执行 {len(tool_calls)} 个调用", HINT_TOO_MANY)
            messages.append(reply)  # 先存 assistant：每条 Tool Result 都要回答历史里已有的调用
            for call in tool_calls:
                result = execute_tool(call)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
                name, call_id = clip(call.function.name, 60), clip(call.id, 80)
                print(f"step {step}: {name} call_id={call_id} result={result}")
                last_ok = f"step {step}: {call_id} 的 Tool Result 已写入历史"
        raise AgentStop(HARNESS, f"超过最大步骤数：{MAX_STEPS}", HINT_MAX_STEPS)
    except AgentStop as stop:
        stop.step, stop.last_ok = step, last_ok
        stop.refused = None if any(kept is reply for kept in messages) else reply
        raise


# ---- §5 tool_call_id 为什么不能丢 ----
# 一次回复可以同时要好几个调用；结果交回去时，靠 tool_call_id 对上是哪一个，就像订单号。
# 本课的历史只有三种角色：user 提问，assistant 说话或下单，tool 带着 id 交回结果。system 与
# developer 角色放开发者指令，本课用不上；工具定义不进历史，放在请求顶层的 tools 参数里。
# Anthropic 的 Messages API 用 tool_use/tool_result 内容块表达同一件事，两边的字段不能混用。


def pairing_problems(messages: list) -> list:
    """OpenAI 的配对规则：tool 消息回答前一条 assistant 的调用，每个调用恰好回答一次。"""
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


# ---- §6 运行与自检 ----
# 先跑 --self-check（自检）：它用假的响应只验证本地代码（Router、参数校验、id 配对、控制流），
# 不碰 SDK、网络、Provider 和真实模型，所以证明不了 key 对、端点对、模型真会调用工具。
# 在线运行只用三个环境变量：OPENAI_API_KEY、OPENAI_MODEL，第三方端点才要的 OPENAI_BASE_URL
# （不读本地登录文件；SDK 只拿到这里明确交给它的值），请求要走过整条调用链：
#   Harness → SDK/网络 → Provider → Model
#                                   ↓
#   Tool  ←  Router  ←  Assistant(tool_calls)
# 出错时沿链找“最后一个成功事件”和“第一个失败事件”：AgentStop 的 link 是失败的那一环，last_ok
# 是它之前最后成功的一步。例如第一次请求 Provider 就回“模型不支持 tools”：multiply() 根本还没
# 运行过，该查模型能力、模型名、端点路径，而不是去改工具。


# ---- §7 下一课从哪里接上 ----
# 到这里 messages 已是完整的一轮，却只活在进程内存里：进程一退出就没了；这个 Loop 也没有输入
# 预算、摘要或长期记忆。要接着跑，先把消息存成 Session，再用 Checkpoint 记下跑到哪一步。若进程
# 恰好在 Tool Result 产生后崩溃，结果还没存下，重启后无从知道工具是否已经执行过：对发邮件、扣款
# 这类有外部副作用的工具，就要用 Execution Ledger 记下实际执行过什么，并让重试保持幂等（同一个
# 业务请求重试多少次，副作用都只发生一次）。
# 乘法算几遍都一样，本课用不上后两样。


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


class FakeClient:
    """按顺序返回预设响应，并记下每次请求的 JSON 快照（SDK 也在调用时序列化）。"""

    def __init__(self, *responses: object):
        self.responses, self.requests = list(responses), []
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self.create))

    def create(self, **request: object) -> object:
        self.requests.append(json.loads(json.dumps(request)))
        return self.responses.pop(0)


def run_fake(*responses: object) -> tuple:
    """用假客户端跑一次 Loop，返回 (回答或 AgentStop, 客户端, 历史, 打印的行)。"""
    client, messages, saved, sys.stdout = FakeClient(*responses), [], sys.stdout, io.StringIO()
    try:
        outcome = run_agent(client, "fake-model", DEFAULT_QUESTION, messages)
    except AgentStop as stop:
        outcome = stop
    finally:
        printed, sys.stdout = sys.stdout.getvalue(), saved
    return outcome, client, messages, printed.splitlines()


ANSWER, RESULT_3720 = "248 乘以 15 等于 3720。", '{"status":"completed","result":3720}'


def check_multiply() -> None:
    expect(multiply(248, 15) == 3720, "multiply(248, 15) 应为 3720")
    for a, b in [(True, 15), (248, False), ("248", 15), (248.0, 15), (None, 15), (10**6 + 1, 2)]:
        try:
            multiply(a, b)
        except ValueError:
            continue
        raise AssertionError(f"multiply({a!r}, {b!r}) 应被拒绝")


def check_schema() -> None:
    parameters = TOOLS[0]["function"]["parameters"]
    integer = {"type": "integer"}
    expect(parameters["properties"] == {"a": integer, "b": integer}, "a、b 都应是 integer")
    expect(sorted(parameters["required"]) == ["a", "b"], "a、b 都应是必填")
    expect(parameters.get("additionalProperties") is False, "Schema 应禁止多余字段")


def check_router() -> None:
    ok = execute_tool(fake_call("call_1"))
    expect(ok == RESULT_3720, f"成功结果应是紧凑 JSON，实际 {ok}")
    bad = ['{"a":248,"b":15,"c":1}', '{"a":248}', '{"a":1,"a":248,"b":15}', '{"a":248,', "[1, 2]"]
    bad += ["", '{"a":"248","b":15}', '{"a":true,"b":15}', "[" * 100_000]
    for arguments in bad:
        result = json.loads(execute_tool(fake_call("call_x", arguments)))
        expect(result["status"] == "error", f"{arguments[:30]} 应得到受控错误，实际 {result}")
    unknown = json.loads(execute_tool(fake_call("call_x", name="delete_files")))
    expect(unknown["status"] == "error" and "delete_files" in unknown["message"], "未知工具应受控")


def check_happy_path() -> None:
    article = [
        "step 1: finish_reason=tool_calls",
        f"step 1: multiply call_id=call_1 result={RESULT_3720}",
        "step 2: finish_reason=stop",
    ]
    outcome, client, messages, lines = run_fake(
        fake_response("tool_calls", tool_calls=[fake_call("call_1")]),
        fake_response("stop", content=ANSWER),
    )
    expect(outcome == ANSWER and len(client.requests) == 2, f"应两次请求后得到回答：{outcome}")
    expect(set(client.requests[0]) == {"model", "messages", "tools"}, "请求只带三个参数")
    sent = client.requests[1]["messages"][-1]
    want = {"role": "tool", "tool_call_id": "call_1", "content": RESULT_3720}
    expect(sent == want, f"第二次请求应带 call_1 的结果 3720，实际 {sent}")
    roles = [m["role"] for m in messages]
    expect(roles == ["user", "assistant", "tool", "assistant"], f"消息序列不对：{roles}")
    expect(messages[1]["content"] == "", "content 为 null 时应存成空字符串")
    expect(lines == article, f"步骤行与课文不同：{lines}")


def check_pairing() -> None:
    two_calls = [fake_call("call_1"), fake_call("call_2", '{"a":6,"b":7}')]
    _, _, messages, _ = run_fake(
        fake_response("tool_calls", tool_calls=two_calls), fake_response("stop", content="好")
    )
    pairs = [(m["tool_call_id"], json.loads(m["content"])["result"]) for m in messages[2:4]]
    expect(pairs == [("call_1", 3720), ("call_2", 42)], f"并行调用应按 id 配对：{pairs}")
    expect(pairing_problems(messages) == [], f"历史应能配对：{pairing_problems(messages)}")
    lost = [*messages[:2], {**messages[2], "tool_call_id": ""}, *messages[3:]]
    expect(len(pairing_problems(lost)) == 2, "丢了 tool_call_id 的历史应被查出来")


def check_finish_reasons() -> None:
    calls = [fake_call("call_1")]
    outcome, client, _, lines = run_fake(
        fake_response("stop", tool_calls=calls), fake_response("stop", content=ANSWER)
    )
    expect(
        outcome == ANSWER and len(client.requests) == 2, f"Tool Call + stop 应照常执行：{outcome}"
    )
    expect(lines[0] == "step 1: finish_reason=stop", f"步骤行应显示真实的 finish_reason：{lines}")
    harmony = "<|channel|>commentary to=functions.multiply <|constrain|>json<|message|>{}<|call|>"
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
        "Harmony 标记写的调用": fake_response("stop", content=harmony),
    }
    for label, response in cases.items():
        outcome, client, messages, _ = run_fake(response)
        expect(isinstance(outcome, AgentStop), f"{label} 应停下 Loop，实际返回 {outcome!r}")
        expect(len(messages) == 1 and len(client.requests) == 1, f"{label} 不应执行或记入任何东西")


def check_max_steps() -> None:
    responses = [fake_response("tool_calls", tool_calls=[fake_call(f"call_{n}")]) for n in range(9)]
    outcome, client, messages, _ = run_fake(*responses, *responses)
    reason = getattr(outcome, "reason", "")
    expect(reason == f"超过最大步骤数：{MAX_STEPS}", f"应停在步数上限：{outcome}")
    expect(len(client.requests) == MAX_STEPS, f"应正好发出 {MAX_STEPS} 次请求")
    last = f"call_{MAX_STEPS - 1}"
    expect(messages[-1].get("tool_call_id") == last, "最后一次工具结果应写入本地历史")
    sent_ids = [m.get("tool_call_id") for m in client.requests[-1]["messages"]]
    expect(last not in sent_ids, "最后一次工具结果不应发给模型")


def check_provider_fields() -> None:
    signature = {"google": {"thought_signature": "c2lnbmF0dXJl"}}
    call = SimpleNamespace(**vars(fake_call("functions.multiply:0")), extra_content=signature)
    first = fake_response("tool_calls", content="<think>先乘</think>", tool_calls=[call])
    details = [{"type": "reasoning.encrypted", "data": "b3BhcXVl"}]
    first.choices[0].message.__dict__.update(
        reasoning_content="先调用乘法工具", reasoning_details=details, reasoning="私有字段"
    )
    final = fake_response("stop", content="<think>写出结果</think>\n\n" + ANSWER)
    outcome, client, _, lines = run_fake(first, final)
    echoed = client.requests[1]["messages"][1]
    expect(echoed.get("reasoning_content") == "先调用乘法工具", "reasoning_content 应原样回传")
    expect(echoed.get("reasoning_details") == details, "reasoning_details 应原样回传")
    expect(echoed["tool_calls"][0].get("extra_content") == signature, "extra_content 应原样回传")
    expect(echoed["content"] == "<think>先乘</think>", "content 应原样回传，think 块也不动")
    expect("reasoning" not in echoed, "其他私有字段不应回传")
    expect(echoed["tool_calls"][0]["id"] == "functions.multiply:0", "id 应原样回传")
    expect(outcome == ANSWER, f"打印的回答应去掉 think 块：{outcome!r}")
    expect(not any("先" in line or "b3Bh" in line for line in lines), "推理不应打印")


SELF_CHECKS = [
    ("multiply 拒绝 bool、字符串、小数、None 和超范围的值", check_multiply),
    ("Schema：a、b 都是 integer、都必填，不许多余字段", check_schema),
    ("Router 把坏 JSON、多余/缺少/重复的键、未知工具变成受控错误", check_router),
    ("两次请求跑通，第二次请求带 call_1 与 3720", check_happy_path),
    ("并行的两个 Tool Call 按 tool_call_id 配对", check_pairing),
    (
        "Tool Call + stop 照常执行；length、矛盾、缺 id、不是回答的回答：都停下",
        check_finish_reasons,
    ),
    ("MAX_STEPS 限制请求次数，最后的结果不发给模型", check_max_steps),
    ("Provider 要求带回的字段原样回传，推理不打印", check_provider_fields),
]


def self_check() -> int:
    """用与 SDK 响应同形的假对象逐项离线检查；失败时指出是哪一项，退出码 1。"""
    for number, (name, check) in enumerate(SELF_CHECKS, start=1):
        try:
            check()
        except Exception as error:  # 意外的异常同样说明这一项没通过
            print(f"[{number}/{len(SELF_CHECKS)}] 失败：{name}：{error}", file=sys.stderr)
            print("self-check failed", file=sys.stderr)
            return EXIT_STOPPED
        print(f"[{number}/{len(SELF_CHECKS)}] ok  {name}")
    print("self-check passed")
    return EXIT_OK


def demo() -> int:
    """没有 API Key 也能看 Loop 真跑：把与 SDK 同形的预设响应喂给真正的 run_agent。"""

    answer = fake_response("stop", content=ANSWER)
    right = fake_response("tool_calls", tool_calls=[fake_call("call_1")])
    wrong = fake_response("tool_calls", tool_calls=[fake_call("call_1", '{"a":"248","b":15}')])
    fixed = fake_response("tool_calls", tool_calls=[fake_call("call_2")])
    cut = fake_response("length", tool_calls=[fake_call("call_1", '{"a":248,"b')])  # 只生成了一半
    scenes = {
        "§4 课文的一轮：两次请求，中间执行一次工具": [right, answer],
        '§3 参数写错（"248"）：错误作为 Tool Result 交回，模型改正': [wrong, fixed, answer],
        "§4 Tool Call 被 length 截断：Loop 停下，一个工具都不执行": [cut],
    }
    for number, (title, responses) in enumerate(scenes.items(), start=1):
        print(f"{'' if number == 1 else chr(10)}== 场景 {number}/{len(scenes)}：{title}")
        messages = []
        try:
            print("Agent> " + run_agent(FakeClient(*responses), "demo", DEFAULT_QUESTION, messages))
        except AgentStop as stop:
            report(stop, {}, file=sys.stdout)
        if number == 1:
            print(json.dumps(messages, ensure_ascii=False, indent=2))
    return EXIT_OK


# 动手改一改：README 的“动手改一改”一节列出几处一行的改动（删掉 bool 检查、放行 length……），
# 每处都写着自检会用哪一行抓住它。改完跑 --self-check，看是哪一项先失败。


# ======================== 第三部分：附录——真实世界的防护 ========================

# ---- 文字与终端：模型和 Provider 送来的字符串，打印或回传之前先过这几道关 ----
SECRETS: list = []  # check_config() 登记 API Key；任何输出都先遮住它
# 能操纵终端的字符：C0（换行、制表符除外）、DEL、C1（如 U+009B CSI）、双向文字控制符
TERMINAL_UNSAFE = "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]"


def json_type_name(value: object) -> str:  # 错误交回模型：说 JSON 的类型名，不说 Python 的
    names = {bool: "布尔值", float: "小数", str: "字符串", dict: "对象", list: "数组"}
    return "空值 null" if value is None else names.get(type(value), f"「{type(value).__name__}」")


def made_safe(text: str) -> str:
    """遮住已登记的 API Key，把能操纵终端的字符写成 \\u001b 这样的转义（看得见，却不起作用）。"""
    for secret in SECRETS:
        text = text.replace(secret, "***")
    return re.sub(TERMINAL_UNSAFE, lambda match: f"\\u{ord(match[0]):04x}", text)


def clip(value: object, limit: int = 200) -> str:
    """把任意外来的值变成有界的一行：换行变空格，遮 key、转义控制字符，最后才截断。"""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=repr)
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    text = made_safe(re.sub(r"[\t\n\r]+", " ", text)).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def without_password(url: str) -> str:
    """地址照原样显示，只把 用户名:密码@ 换成 ***@；少了 // 或协议也一样。"""
    return clip(re.sub(r"^([A-Za-z][\w+.-]*:/*)?.*@", r"\1***@", url, flags=re.S), 120)


def shown_value(value: object) -> str:
    """正常的值原样显示；空串、null 等用 JSON 写法，免得在屏幕上看不见。"""
    return clip(value if isinstance(value, str) and value else json.dumps(value, default=repr), 40)


def is_text(value: object) -> bool:
    """是能按 UTF-8 原样发回去的字符串；JSON 里的孤立代理字符（如 \\ud800）做不到。"""
    return isinstance(value, str) and value.encode("utf-8", "replace").decode() == value


# 聊天模板的标记：<|channel|>（gpt-oss 的 Harmony）、<｜tool▁calls▁begin｜>（DeepSeek）、<tool_call>
TEMPLATE_MARKUP = (
    r"<\|[^<>|]{1,40}\|>|<｜[^<>｜]{1,40}｜>|</?tool_call>|\[/?tool_calls\]|<function=|</function>"
)
DEFINITION_KEYS = {"description", "properties", "required"}  # 工具定义，不是调用
# 回答本身是没被解析的调用时的样子。只看开头和结尾：正文里提到 <tool_call>、举个 JSON 例子都还是回答
CALL_TEXT_PATTERNS = (
    rf"^(?:{TEMPLATE_MARKUP})|(?:{TEMPLATE_MARKUP})$",  # 以模板标记开头或结尾
    r"(?m)^(?:```|~~~)\s*\w*(?:tool|function)\w*\s*$",  # 标着 tool 或 function 的代码块
    r"(?m)^\s*Action\s*Input\s*:",  # ReAct 的文字格式：Action / Action Input
    r"^\[?[A-Za-z_]\w*\([^()]*\)\]?\Z",  # multiply(248, 15)、[multiply(a=2, b=3)]
)


def looks_like_tool_call_text(text: str) -> bool:
    """符合上表，或整段、最后几段之一以 { 或 [ 开头（可带围栏），顶层键里有函数名和参数。"""
    text = text.strip()
    if any(re.search(pattern, text, re.I) for pattern in CALL_TEXT_PATTERNS):
        return True
    for start in [0, *[m.start() for m in re.finditer(r"(?m)^(?:```|~~~|\{|\[)", text)][-3:]]:
        block = re.sub(r"^(?:```|~~~)[\w-]*|(?:```|~~~)$", "", text[start:]).strip()
        try:
            value = json.loads(block)
        except (ValueError, RecursionError):  # 写坏的 JSON：只看开头第一个键和前几百个字符
            head = block[:600] if re.match(r"""[\[\s]*\{+\s*["']?\w+["']?\s*:""", block) else ""
            keys = set(re.findall(r"""["'](\w+)["']\s*:""", head))
        else:
            value = value.get("tool_calls", value) if isinstance(value, dict) else value
            value = value[0] if isinstance(value, list) and value else value
            inner = value.get("function") if isinstance(value, dict) else None
            value = inner if isinstance(inner, dict) else value  # "function": "multiply" 也算
            keys = set(value) if isinstance(value, dict) else set()
        named = keys & {"name", "tool_name", "function"}
        if named and keys & {"arguments", "parameters", "args"} and not keys & DEFINITION_KEYS:
            return True
    return False


class SafeOutput:
    """包住 stdout/stderr：遮 key、转义终端控制字符；写不出去（管道关了、磁盘满了）就记下来。
    写 stderr 之前先冲刷 stdout：两路合进一个管道（2>&1 | tee）时，行的先后就是事情的先后。"""

    def __init__(self, stream: object, flush_first: object = None):
        self.stream, self.failed, self.flush_first = stream, stream is None, flush_first
        self.encoding, self.status_width = getattr(stream, "encoding", None) or "utf-8", 0

    def write(self, text: str) -> int:
        self.status("")  # 临时状态行先擦掉，再写真正的输出
        getattr(self.flush_first, "flush", bool)()
        text = made_safe(text.replace("\r\n", "\n"))  # Windows 换行照常显示，单独的 \r 才转义
        self._try("write", text.encode(self.encoding, "backslashreplace").decode(self.encoding))
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


# ---- 响应与失败：把 finish_reason、SDK 的异常和 Provider 的错误体翻译成能照着查的一行 ----
HINT_ENDPOINT = "这个端点的响应与 OpenAI 协议不一致，Harness 不会替它猜；换模型或端点再试"
HINT_BASE_URL = "检查 OPENAI_BASE_URL 是否指向 API（通常以 /v1 结尾），以及 Provider 的原话"
HINT_MAX_STEPS = "模型一直在调用工具；检查问题、模型能力，以及工具错误是否反复出现"
HINT_TOO_MANY = f"上限是 {MAX_TOOL_CALLS}，一个都没执行；这个端点或模型的输出不正常，换一个再试"
HINT_URL_FORM = "只写协议、主机、端口和路径，例如 http://127.0.0.1:11434/v1"
HINT_INSTALL = (
    "先激活 README 第 2 步建的虚拟环境（. .venv/bin/activate，Windows 是 .venv\\Scripts\\"
    'Activate.ps1），还没建就照第 2 步建；或在虚拟环境里 pip install "openai>=1.109.1,<4"'
)
HINT_REFUSAL = "换一种问法，或查看 Provider 的内容策略"
HINT_EMPTY_ANSWER = "再问一次；仍为空就换更大的模型，或确认端点支持 Tool Calling"
HINT_CALL_AS_TEXT = (
    "Harness 不从文字里解析调用，要让服务端把它解析成 tool_calls：vLLM、SGLang 开 tool-call parser"
    "（gpt-oss 的 Harmony 格式要新版服务端和它的 parser）；llama.cpp 光加 --jinja 不够，还要"
    "教对格式的聊天模板：Qwen2.5-Coder 用 templates/qwen2.5-coder-tools.jinja（见 README）；"
    "Ollama 选带 tools 标签的模型"
)
HINT_LENGTH = (
    "输出上限或上下文窗口：调大 max_tokens（llama-server 的 -n/--n-predict，Ollama 的 "
    "num_predict），或换上下文更大的模型、缩短问题"
)
HINT_PROXY = (  # Clash、V2Ray 常给 socks5:// 代理，httpx 要多装 socksio 才能用
    "检查 {name}：代理在不在运行、端口和认证对不对（socks5:// 还要 python -m pip install socksio）"
    "；本机或内网的端点加进 NO_PROXY（如 NO_PROXY=127.0.0.1,localhost），或运行前 unset {name}"
)
FINISH_REASONS = {  # finish_reason -> (失败的一环, 含义, 建议)；不在表里的值一律当作未知
    "length": (MODEL, "输出达到 Token 上限被截断", HINT_LENGTH),
    "content_filter": (PROVIDER, "内容被 Provider 过滤", HINT_REFUSAL),
    "tool_calls": (PROVIDER, "消息里却没有任何 Tool Call", HINT_ENDPOINT),
    "function_call": (PROVIDER, "OpenAI 已弃用的旧 functions 协议", HINT_ENDPOINT),
}
HTTP_HINTS = {
    400: "按 Provider 的原话检查请求",
    401: "检查 OPENAI_API_KEY 是否正确、是否属于 OPENAI_BASE_URL 指向的 Provider",
    403: "这个 key 无权使用该模型或端点；检查 OPENAI_API_KEY 与账户权限",
    404: "检查 OPENAI_MODEL 的模型名；OPENAI_BASE_URL 通常要以 /v1 结尾",
    429: "触发频率限制或额度用完：检查余额与配额，稍后再试",
    500: "Provider 服务端出错：稍后再试",
}
# Ollama、vLLM、llama.cpp、OpenRouter 等说“不支持工具”时的原话片段
NO_TOOLS_PHRASES = ("does not support tools", "unsupported param: tools", "tool choice requires")
NO_TOOLS_PHRASES += ("tools param requires", "support tool use", "does not support function call")
HINT_NO_TOOLS = (
    "这个模型或端点不支持 Tool Calling：换支持 tools 的模型（vLLM 要开启自动工具选择，"
    "llama.cpp 要加 --jinja）；multiply() 还没运行过，不要去改工具"
)
NETWORK_FAILURES = [  # 没有 HTTP 状态码的失败，按异常链里的字样认出原因
    rule.split(" | ")  # 字样 | 原因 | 建议：从上往下先命中的算数，最后的 .* 兜底
    for rule in """\
CERTIFICATE_VERIFY_FAILED | TLS 证书校验失败 | 检查 SSL_CERT_FILE、SSL_CERT_DIR，或 unset 它们
SSL|handshake | TLS 握手失败：这个端口说的多半是 http | 本地服务用 http://，别写成 https://
TooManyRedirects | 重定向循环 | 用 curl -I 看 OPENAI_BASE_URL 跳到哪里，改成最终的 API 地址
MemoryError|new thread|Too many open | 操作系统拒绝了线程、内存或文件 | 放宽 ulimit 后再试
Protocol|ReadError|Decoding | 连上了服务器，但响应中途断开或无法解码 | 看服务端日志和中间的代理
Connect | 连不上服务器 | 检查端点的地址、端口和服务是否已启动
WholeRequest | 请求超时 | 慢或限流（SDK 可能在等 Retry-After）：稍后再试，或调大 OPENAI_TIMEOUT
Timeout | 请求超时 | 检查网络和服务端；本地模型慢就调大 OPENAI_TIMEOUT（秒）
.* | 请求失败 | 检查 openai 的版本与网络""".splitlines()
]


def explain_finish_reason(finish_reason: object, with_tool_calls: bool) -> AgentStop:
    unknown = (PROVIDER, "不是 OpenAI 协议中的值", HINT_ENDPOINT)
    link, meaning, hint = FINISH_REASONS.get(str(finish_reason), unknown)  # 值也可能是 [] 或 {}
    shown = clip(json.dumps(finish_reason, ensure_ascii=False, default=repr), 40)
    if with_tool_calls:
        what = f"有 Tool Call，但 finish_reason={shown}（{meaning}）：不可信，一个工具都没执行"
    else:
        what = f"模型没有正常结束：finish_reason={shown}（{meaning}），不能当成最终回答"
    return AgentStop(link, what, hint)


def check_response_shape(response: object) -> None:
    """形状检查（不是课文的规则）：有 choices[0]，字段能原样回传，每个调用都是可读的 function。"""
    choices = getattr(response, "choices", None)
    if not isinstance(choices, list) or not choices:  # HTTP 200 却没有 choices：转述 Provider 的话
        said = response[0] if isinstance(response, list) and response else response  # [{"error":…}]
        said = said if isinstance(said, (str, dict)) else getattr(said, "error", None)
        page = isinstance(said, str)
        what = "返回的不是 JSON（可能是一张网页）" if page else "Provider 用 HTTP 200 返回了错误"
        what = f"{what}：{provider_text(said)}" if said else "响应里没有 choices"
        raise AgentStop(PROVIDER, what, HINT_BASE_URL)
    if getattr(choices[0], "error", None):  # OpenRouter：HTTP 200，错误写在 choice 里
        said = provider_text(choices[0].error)
        raise AgentStop(PROVIDER, f"Provider 在 choices[0].error 里报错：{said}", HINT_BASE_URL)
    message = getattr(choices[0], "message", None)
    calls = getattr(message, "tool_calls", None) or []
    texts = [getattr(message, "content", None), getattr(message, "reasoning_content", None)]
    if not (hasattr(message, "content") and hasattr(message, "tool_calls")):
        raise AgentStop(PROVIDER, "choice 里没有可读的 message", HINT_ENDPOINT)
    if not isinstance(calls, list) or not all(t is None or is_text(t) for t in texts):
        raise AgentStop(PROVIDER, "message 的字段不是能原样回传的文本或列表", HINT_ENDPOINT)
    for index, call in enumerate(calls, start=1):  # 缺 id 留给 run_agent 去拦；id 若有就要是文本
        function, call_id = getattr(call, "function", None), getattr(call, "id", None)
        fields = (getattr(function, "name", None), getattr(function, "arguments", None))
        readable = all(map(is_text, fields)) and (call_id is None or is_text(call_id))
        if getattr(call, "type", None) != "function" or not readable:
            what = f"第 {index} 个 Tool Call 不是可读的 function 调用"
            raise AgentStop(PROVIDER, what, HINT_ENDPOINT)


def explain_request_failure(error: Exception) -> AgentStop:
    """把 SDK 的异常翻译成能照着检查的话；按属性、类名和原话判断，自检时不必导入 openai。"""
    status, kind = getattr(error, "status_code", None), type(error).__name__
    cause = error.__cause__ or error  # SDK 把 httpx 的异常包在里面，原话在那里
    seen = f"{kind}: {error} {type(cause).__name__}: {cause}"
    detail = f"（{kind}: {clip(str(cause), 120)}）"
    said = f"HTTP {status}：{provider_text(getattr(error, 'body', None) or str(error))}"
    pattern, reason, advice = next(rule for rule in NETWORK_FAILURES if re.search(rule[0], seen))
    via = proxy_for(str(getattr(getattr(error, "request", None), "url", "")))
    unreachable = status in (407, 502) or (status is None and pattern == "Connect")
    if via and unreachable:  # 代理挡在中间时，“连不上”和它自己的 407、502 都先怪它
        what = f"请求没能经代理 {without_password(via[1])}（{via[0]}）送到端点"
        what += f"：{said}" if status else detail
        return AgentStop(SDK_NETWORK, what, HINT_PROXY.format(name=via[0]), EXIT_REQUEST_FAILED)
    if isinstance(status, int):
        hint = HTTP_HINTS.get(status, HTTP_HINTS[500 if status >= 500 else 400])
        hint = HINT_NO_TOOLS if any(p in said.lower() for p in NO_TOOLS_PHRASES) else hint
        return AgentStop(PROVIDER, said, hint, EXIT_REQUEST_FAILED)
    if isinstance(error, json.JSONDecodeError):
        what = f"服务器回了 HTTP 200，响应体却不是完整的 JSON（{clip(str(error), 80)}）"
        return AgentStop(PROVIDER, what, HINT_BASE_URL, EXIT_REQUEST_FAILED)
    return AgentStop(SDK_NETWORK, reason + detail, advice, EXIT_REQUEST_FAILED)


def provider_text(body: object) -> str:
    """Provider 的原话：拆开 [...]、{"error": ...} 和 OpenRouter 的 metadata.raw；网页取标题。"""
    body = body[0] if isinstance(body, list) and body else body  # Gemini 兼容端点把错误包在列表里
    if isinstance(body, dict):
        inner = body.get("error", body)
        if not isinstance(inner, dict):
            return clip(inner)
        said, meta = clip(inner.get("message") or inner), inner.get("metadata")
        raw = meta.get("raw") if isinstance(meta, dict) else None
        try:  # noqa: SIM105  常是一段 JSON 文本，也可能只是文字
            raw = json.loads(raw)
        except (TypeError, ValueError, RecursionError):
            pass
        return clip(f"{said}：{provider_text(raw)}") if raw else said
    if not isinstance(body, str):
        return clip(body)
    head = clip(body, 4000)  # 先遮 key 再截断；只看开头：网页再大，找标题的工作量也有上限
    title = re.search(r"(?is)<title>(.*?)(?:</title>|$)", head)
    head = title[1] if title else head
    text = " ".join(re.sub(r"<[^<>]*(>|$)", " ", head).replace("<", " ").split())
    if text or not body.strip():
        return clip(text) or "（空响应体）"
    return f"（{len(body)} 个字符的响应体里没有可读的文字）"


class WholeRequestTimeout(TimeoutError): ...  # 整次请求（含重试）超过了总期限


class DeadlineClient:
    """OPENAI_TIMEOUT 只限制每次读 socket，每秒滴一个字节的服务器能把请求拖上几分钟。所以请求在
    后台线程里跑，主线程只等到总期限，过期就放弃它；stderr 若是终端，就显示已等了几秒。"""

    def __init__(self, client: object, seconds: float):
        self.client, self.seconds = client, seconds
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self.create))

    def create(self, **request: object) -> object:
        import threading
        from concurrent.futures import Future, wait

        outcome = Future()  # 装着响应或 SDK 抛出的异常，result() 原样交出

        def call() -> None:
            try:
                outcome.set_result(self.client.chat.completions.create(**request))
            except Exception as error:
                outcome.set_exception(error)

        threading.Thread(target=call, daemon=True).start()  # 不用线程池：它退出时要等线程跑完
        status = getattr(sys.stderr, "status", lambda text: None)
        for waited in range(1, int(self.seconds) + 2):  # 每秒醒来一次，报告已经等了几秒
            if wait([outcome], min(1.0, self.seconds - waited + 1)).done:
                break
            status(f"…等待响应 {waited} 秒")
        status("")  # 步骤行写在 stdout 上：返回之前先擦掉
        if not outcome.done():
            raise WholeRequestTimeout(f"整次请求（含重试）超过 {self.seconds:g} 秒仍未完成")
        return outcome.result()


# ---- 环境：SDK 和 httpx 还会读别的环境变量（见 --help）；出了问题，说出是哪一个 ----
CONNECT_SECONDS = 5.0  # 与 SDK 自己的默认连接期限相同
DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_TIMEOUT_SECONDS, MAX_TIMEOUT_SECONDS = 60.0, 3600.0  # SDK 默认等 10 分钟，学习时太久
MAX_RETRIES = 1  # SDK 默认重试 2 次；配置错误（如 500 Unsupported param）重试也没用
ORG_VARIABLES = ("OPENAI_ORG_ID", "OPENAI_PROJECT_ID")
KEY_LIKE = re.compile(r"(?:sk|gsk|xai)[-_]\S*|AIza\S*|[A-Za-z0-9]{32,}(?:\.\w+)?")


def proxy_for(url: str) -> tuple:
    """httpx 会给这个地址用的代理：(变量名, 代理地址)，或 ()。httpx 用的也是这两个函数。"""
    from urllib.parse import urlsplit
    from urllib.request import getproxies, proxy_bypass_environment

    parts, proxies = urlsplit(url), getproxies()
    key = parts.scheme if proxies.get(parts.scheme) else "all"  # <协议>_proxy 先于 all_proxy
    if not (proxies.get(key) and parts.hostname) or proxy_bypass_environment(parts.netloc, proxies):
        return ()
    names = [n for n in sorted(os.environ, key=str.isupper) if n.lower() == f"{key}_proxy"]
    return (names or ["系统代理设置"])[0], proxies[key]  # 同名时小写的那个算数


def make_client(config: dict) -> object:
    """创建 OpenAI SDK 客户端（只有这里导入 openai），给整次请求加上总期限。"""
    try:
        from openai import OpenAI, Timeout
    except Exception as error:  # 没装、装坏了，还是脚本旁边同名的 openai.py 或 openai/ 挡住了它
        from importlib.util import find_spec

        spec = find_spec("openai")  # sys.modules 里放着 None 时，它也返回 None
        where = spec and (spec.origin or next(iter(spec.submodule_search_locations or []), None))
        if where and not re.search(r"[/\\](site|dist)-packages[/\\]", where):
            what = f"导入的 openai 不是 SDK，而是 {clip(where, 160)}"
            raise config_error(what, "给它改个名字（别叫 openai），再运行") from None
        what = f"openai SDK 导入失败（{type(error).__name__}: {clip(str(error), 120)}）"
        raise config_error(what if where else "没有安装 openai SDK", HINT_INSTALL) from None
    given = {key: config[key] for key in ("api_key", "base_url", "organization", "project")}
    # 连接（含 TLS 握手）单独限时：协议或端口填错几秒就报错，不必等满 OPENAI_TIMEOUT
    timeout = Timeout(config["timeout"], connect=min(config["timeout"], CONNECT_SECONDS))
    # SDK 只用这里明确给它的值：暂时拿走它会自己读的 OPENAI_* 和这个端点用不上的代理变量
    names = [n for n in os.environ if re.fullmatch(r"(?is)openai_.*|.*_proxy", n)]
    hidden = {n: os.environ.pop(n) for n in names if n not in config["proxy"][:1]}
    try:
        client = OpenAI(**given, timeout=timeout, max_retries=MAX_RETRIES)
    except Exception as error:  # 多半是 SDK 顺带读到的证书或代理变量，不是地址写错
        detail = f"{type(error).__name__}: {clip(str(error), 160)}"
        named = [n for n in ("SSLKEYLOGFILE", "SSL_CERT_DIR", "SSL_CERT_FILE") if os.getenv(n)]
        if isinstance(error, OSError) and named:  # ssl 这时读证书文件；ssl.SSLError 也是 OSError
            name = next((n for n in named if os.environ[n] in str(error)), named[-1])
            what, hint = f"{name} 指向的文件不能用（{detail}）", f"改成有效的路径，或 unset {name}"
        elif config["proxy"]:
            name, proxy = config["proxy"]
            what = f"SDK 用不了代理 {name}={without_password(proxy)}（{detail}）"
            hint = HINT_PROXY.format(name=name)
        else:
            what, hint = f"无法创建 OpenAI 客户端：{detail}", HINT_URL_FORM
        raise config_error(what, hint) from None
    finally:
        os.environ.update(hidden)
    return DeadlineClient(client, config["deadline"])


def config_error(what: str, hint: str) -> AgentStop:
    return AgentStop(HARNESS, what, hint, EXIT_USAGE)


def check_config(environ: dict) -> dict:
    """在发出任何请求之前，把缺的、填错的环境变量说清楚（退出码 2）；返回创建客户端所需的值。"""
    from urllib.parse import urlsplit

    for name, hint in (
        ("OPENAI_API_KEY", "本地服务（Ollama、llama.cpp）不校验 key，随便填一个，例如 local"),
        ("OPENAI_MODEL", "填写 Provider 上支持 Tool Calling 的模型名"),
    ):
        if not environ.get(name, "").strip():
            raise config_error(f"缺少环境变量 {name}", f"export {name}=...；{hint}")
    api_key, model = environ["OPENAI_API_KEY"].strip(), environ["OPENAI_MODEL"].strip()
    if len(api_key) >= 8:  # 更短的通常是本地服务的占位符，遮了只会把别的字弄乱
        SECRETS.extend([api_key, json.dumps(api_key)[1:-1]])  # 后者是它在 JSON 里的写法
    if KEY_LIKE.fullmatch(model):  # 报告里会写模型名：它若是 key，就不能打印
        hint = "OPENAI_API_KEY 和 OPENAI_MODEL 可能填反了：key 放前者，模型名放后者"
        raise config_error("OPENAI_MODEL 看起来是一个 API Key（没有打印它）", hint)
    if not is_text(model):
        raise config_error("OPENAI_MODEL 含有无法编码的字符", "检查终端编码后重新设置")
    if not api_key.isascii() or any(char.isspace() for char in api_key):
        raise config_error("OPENAI_API_KEY 只能是不含空白的 ASCII 字符", "重新复制一次 key")
    given_url = environ.get("OPENAI_BASE_URL", "").strip()
    base_url = given_url or DEFAULT_BASE_URL  # 显式给出：否则 SDK 会读一个 export 了却为空的变量
    if problem := base_url_problem(base_url):
        shown = without_password(base_url)
        raise config_error(f"OPENAI_BASE_URL 不可用（{shown}）：{problem}", HINT_URL_FORM)
    # 组织、项目是 OpenAI 自己的概念：只发给它，留下的旧值不跟着请求去第三方端点
    official = (urlsplit(base_url).hostname or "").endswith("api.openai.com")
    sent = {name: environ.get(name, "") if official else "" for name in ORG_VARIABLES}
    for name, value in sent.items():
        if not (value.isascii() and value.isprintable()):
            hint = f"重新设置它，或 unset {name}；Windows 上存 .env 时用 LF 换行"
            raise config_error(f"{name} 里有放不进 HTTP 头的字符（非 ASCII、换行或 \\r）", hint)
    raw_timeout = environ.get("OPENAI_TIMEOUT", "").strip() or str(DEFAULT_TIMEOUT_SECONDS)
    timeout = float(raw_timeout) if re.fullmatch(r"\d*\.?\d+", raw_timeout) else 0.0
    if not 0 < timeout <= MAX_TIMEOUT_SECONDS:
        what = f"OPENAI_TIMEOUT 要是 0 到 {MAX_TIMEOUT_SECONDS:.0f} 之间的秒数：{clip(raw_timeout)}"
        raise config_error(what, "例如 export OPENAI_TIMEOUT=60")
    return {
        "api_key": api_key,
        "model": model,
        "base_url": base_url,
        "base_url_given": bool(given_url),
        "organization": sent["OPENAI_ORG_ID"] or None,
        "project": sent["OPENAI_PROJECT_ID"] or None,
        "proxy": proxy_for(base_url),  # 代理变量和 httpx 一样从进程环境里读
        "timeout": timeout,
        "deadline": timeout * (MAX_RETRIES + 1) + 1,  # 每次尝试一个 timeout，再留一秒余量
    }


def base_url_problem(url: str) -> str:
    """地址里 SDK 会悄悄改写或误用的部分：端口越界、查询参数、用户名密码、完整的接口路径。"""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:  # 例如端口 99999 或 abc、没闭合的 [IPv6]；原话会带出地址里的字，不引用
        return "地址无法解析：端口要是 1–65535 之间的数字，IPv6 地址要用 [] 括好"
    if " " in url or not url.isprintable():  # 别的空白字符都不是 printable
        return "地址里有空格或控制字符"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "要以 http:// 或 https:// 开头，并写明主机"
    if port == 0:
        return "端口要在 1–65535 之间"
    if "@" in parts.netloc:
        return "地址里不能写用户名或密码：SDK 会改用它们认证，key 就不再生效"
    if parts.query or parts.fragment:
        return "地址里不能带 ?查询参数 或 #片段：SDK 会把 /chat/completions 拼在它们后面"
    if parts.path.rstrip("/").endswith("/chat/completions"):
        return "只写到 /v1 为止，SDK 会自己拼上 /chat/completions"
    return ""


# ---- 命令行：解析参数、运行，把 AgentStop 变成两行说明和退出码 ----
HELP = """\
用法：python3 lesson_03_tool_calling_loop.py [--show-messages] [问题……] | --self-check | --demo
  --self-check     离线自检：只用标准库，不需要 API Key
  --demo           离线演示：用预设的响应跑真正的 run_agent，不需要 API Key
  --show-messages  结束后（失败时也一样）把消息历史打印成 JSON
  问题             默认“帮我算一下 248 乘以 15”；几个词会连成一句；-- 之后的都算问题
在线运行读取的环境变量：
  OPENAI_API_KEY   必填；本地服务（Ollama、llama.cpp）不校验，填 local 即可
  OPENAI_MODEL     必填；支持 Tool Calling 的模型名
  OPENAI_BASE_URL  第三方或本地端点才要，写到 /v1 为止；不设就是 https://api.openai.com/v1
  OPENAI_TIMEOUT   每次读取的超时秒数，默认 60；整次请求（含 1 次重试）最多 2 倍再加 1 秒
  其余 OPENAI_* 一律不用（OPENAI_ORG_ID、OPENAI_PROJECT_ID 只发给 OpenAI 官方端点）；
  SDK 还会读 HTTP_PROXY、HTTPS_PROXY、ALL_PROXY、NO_PROXY 和 SSL_CERT_FILE、SSL_CERT_DIR
退出码：0 打印了回答（Loop 正常结束，不保证答对）；1 Loop 被停下（或自检失败）；
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
    SECRETS.clear()
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
            print(json.dumps(without_provider_fields(messages), ensure_ascii=False, indent=2))
        if "--show-messages" in options and refused:
            shown = json.dumps(without_provider_fields(refused), ensure_ascii=False, indent=2)
            print(f"被拒收、没有写进历史的回复（Harness 停下的原因就在这里）：\n{shown}")


def without_provider_fields(value: object) -> object:
    """要原样回传给 Provider 的推理和签名不打印给人看，只标出它们在。"""
    if isinstance(value, list):
        return [without_provider_fields(item) for item in value]
    if isinstance(value, str):  # content 开头的 <think> 块也是推理
        return re.sub(r"(?s)^(\s*<think>).*?(</think>|$)", r"\1（已省略）\2", value, count=1)
    if not isinstance(value, dict):
        return value
    owned = ECHOED_MESSAGE_FIELDS + ECHOED_CALL_FIELDS
    return {k: "（已省略）" if k in owned else without_provider_fields(v) for k, v in value.items()}


def report(stop: AgentStop, config: dict, file: object = None) -> None:
    """两行：哪一环、第几步、原因（端点出的问题还写明端点和模型）；最后一个成功事件和建议。"""
    where = f"step {stop.step}: " if stop.step else ""
    endpoint = ""
    if stop.link in (PROVIDER, SDK_NETWORK) and config:
        default = "" if config["base_url_given"] else "（没设 OPENAI_BASE_URL 时的默认值）"
        endpoint = f"；端点 {config['base_url']}{default}，模型 {clip(config['model'], 80)}"
    last_ok = f"最后一个成功事件：{stop.last_ok}；" if stop.last_ok else ""
    first = f"[{stop.link}] {where}{stop.reason}{endpoint}"
    print(f"{first}\n{last_ok}建议：{stop.hint}", file=file or sys.stderr)


def main(argv: list, environ: dict) -> int:
    """命令行入口，返回退出码。输出都经过 SafeOutput；回答没写出去就不算成功。"""
    saved, out = (sys.stdout, sys.stderr), SafeOutput(sys.stdout)
    sys.stdout, sys.stderr = out, err = out, SafeOutput(saved[1], flush_first=out)
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
