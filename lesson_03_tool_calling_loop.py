# /// script
# requires-python = ">=3.9"
# dependencies = ["openai>=1.109.1,<4"]
# ///
"""第 3 课：跑通第一个 OpenAI-compatible Tool Calling Agent Loop。

消息序列：user -> assistant(tool_calls) -> tool(tool_call_id, result) -> assistant(final)

    python lesson_03_tool_calling_loop.py --self-check      # 离线自检，只用标准库
    python lesson_03_tool_calling_loop.py ["问题"] [--show-messages]   # 在线运行

在线运行读取 OPENAI_API_KEY、OPENAI_MODEL（必填）和 OPENAI_BASE_URL（可选）。
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import re
import sys
from types import SimpleNamespace

MAX_STEPS = 8
MAX_ABS_VALUE = 1_000_000
MAX_ARGUMENTS_CHARS = 1_000  # 合法参数不到 40 个字符；上限挡住超长与深嵌套的输入
DEFAULT_QUESTION = "帮我算一下 248 乘以 15"

EXIT_OK, EXIT_STOPPED, EXIT_USAGE, EXIT_REQUEST_FAILED = 0, 1, 2, 3


# ---------------------------------------------------------------------------
# 1-2. 工具：模型只提供数据，Python 执行固定运算（不用 eval）
# ---------------------------------------------------------------------------


def multiply(a: int, b: int) -> int:
    """两个整数相乘；拒绝 bool、小数、字符串和超出范围的值。"""
    for name, value in (("a", a), ("b", b)):
        # bool 是 int 的子类：不先排除，True 会被悄悄当成 1
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{name} 必须是整数，收到的是{json_type_name(value)}")
        if abs(value) > MAX_ABS_VALUE:
            raise ValueError(f"{name} 的绝对值不能超过 {MAX_ABS_VALUE}")
    return a * b


def json_type_name(value: object) -> str:
    """用模型看得懂的 JSON 类型名描述一个值。"""
    names = {
        bool: "布尔值",
        float: "小数",
        str: "字符串",
        dict: "对象",
        list: "数组",
        type(None): "空值 null",
    }
    return names.get(type(value), f"「{type(value).__name__}」")


# ---------------------------------------------------------------------------
# 3. Schema：告诉模型参数应该怎样填写（它只是说明，不是执行前的门）
# ---------------------------------------------------------------------------

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "multiply",
            "description": "Multiply two integers",
            "parameters": {
                "type": "object",
                "properties": {
                    "a": {"type": "integer"},
                    "b": {"type": "integer"},
                },
                "required": ["a", "b"],
                "additionalProperties": False,
            },
        },
    }
]


# ---------------------------------------------------------------------------
# 3. Router：执行前真正的门。模型能控制的任何输入都变成受控的 Tool Result
# ---------------------------------------------------------------------------


def execute_tool(tool_call: object) -> str:
    """校验一个 Tool Call 并执行 multiply，返回紧凑 JSON 字符串，从不抛异常。"""
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
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"))


def parse_arguments(arguments: object) -> dict:
    """把 arguments 字符串解析成 JSON 对象；重复的键有歧义，直接拒绝。"""
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


def reject_duplicate_keys(pairs: list) -> dict:
    """json.loads 默认保留最后一个重复键；这里不替模型猜它想要哪个。"""
    keys = [key for key, _ in pairs]
    repeated = sorted({key for key in keys if keys.count(key) > 1})
    if repeated:
        raise ValueError(f"工具参数有重复的键：{clip(repeated, 80)}")
    return dict(pairs)


# ---------------------------------------------------------------------------
# 外来文字：模型和 Provider 送来的字符串，打印或回传之前都要过这几道关
# ---------------------------------------------------------------------------

# 在线运行时 read_config() 把 API Key 放进来；任何外来文字在打印前都先遮住它
SECRETS: list = []


def redact(text: str) -> str:
    """把已登记的 API Key 换成 ***。"""
    for secret in SECRETS:
        text = text.replace(secret, "***")
    return text


def clip(value: object, limit: int = 200) -> str:
    """把任意外来的值变成一行可打印文本：遮住 key，去掉控制字符和孤立代理字符，限制长度。"""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=repr)
    text = redact(text).encode("utf-8", "backslashreplace").decode("utf-8")
    text = re.sub(r"[\x00-\x1f\x7f-\x9f]+", " ", text).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def is_text(value: object) -> bool:
    """是能按 UTF-8 原样发回去的字符串；JSON 里的孤立代理字符（如 \\ud800）做不到。"""
    return isinstance(value, str) and value.encode("utf-8", "replace").decode() == value


# ---------------------------------------------------------------------------
# 4. 把 API 返回的 Assistant Message 存回历史
# ---------------------------------------------------------------------------


def assistant_message_from_api(message: object) -> dict:
    """只保留 role、content、tool_calls（原样回传），以及 Provider 要求回传的 reasoning_content。"""
    content, tool_calls = getattr(message, "content", None), getattr(message, "tool_calls", None)
    # null 与 "" 都合乎 OpenAI 协议，但 Ollama、旧版 LM Studio 拒收 null
    saved = {"role": "assistant", "content": "" if content is None else content}
    if tool_calls:
        saved["tool_calls"] = [
            {
                "id": call.id,
                "type": call.type,
                "function": {"name": call.function.name, "arguments": call.function.arguments},
            }
            for call in tool_calls
        ]
    # DeepSeek、Kimi 的思考模式要求在工具回合原样带回它；其他私有字段一律不回传
    reasoning_content = getattr(message, "reasoning_content", None)
    if reasoning_content is not None:
        saved["reasoning_content"] = reasoning_content
    return saved


# ---------------------------------------------------------------------------
# 4. 有限步 Agent Loop：受控错误回给模型；协议状态不可信时停下整个 Loop
# ---------------------------------------------------------------------------

HARNESS, SDK_NETWORK, PROVIDER, MODEL = "Harness", "SDK/网络", "Provider", "Model"
HINT_ENDPOINT = "这个端点的响应与 OpenAI 协议不一致，Harness 不会替它猜；换模型或端点再试"
HINT_BASE_URL = "检查 OPENAI_BASE_URL 是否指向 API（通常以 /v1 结尾），以及 Provider 的原话"

# finish_reason -> (失败的一环, 含义, 建议)；不在表里的值一律当作未知
FINISH_REASONS = {
    "length": (MODEL, "输出达到 Token 上限被截断", "缩短问题，或换上下文更大的模型"),
    "content_filter": (PROVIDER, "内容被 Provider 过滤", "换一种问法；查看 Provider 的内容策略"),
    "stop": (PROVIDER, "部分兼容端点的已知偏差", HINT_ENDPOINT),
}
UNKNOWN_FINISH_REASON = (PROVIDER, "不是 OpenAI 协议中的值", HINT_ENDPOINT)


class AgentStop(Exception):
    """Loop 停下的唯一异常：哪一环失败、原因、建议，以及最后一个成功事件。"""

    def __init__(self, link: str, reason: str, hint: str, exit_code: int = EXIT_STOPPED):
        super().__init__(reason)
        self.link, self.reason, self.hint, self.exit_code = link, reason, hint, exit_code
        self.last_ok = ""


def run_agent(client: object, model: str, user_text: str, messages: list | None = None) -> str:
    """最多发 MAX_STEPS 次模型请求，返回最终回答；传入 messages 可在外面看到历史。"""
    messages = [] if messages is None else messages
    messages.append({"role": "user", "content": user_text})
    last_ok = "Harness 已就绪，还没有收到任何模型响应"
    try:
        for step in range(1, MAX_STEPS + 1):
            try:
                response = client.chat.completions.create(
                    model=model, messages=messages, tools=TOOLS
                )
            except Exception as error:  # SDK 的边界：连接、超时、HTTP 错误都从这里抛出
                raise request_failure(error, step) from None
            last_ok = f"step {step}: 收到 HTTP 响应"
            choice = first_choice(response, step)
            finish_reason = getattr(choice, "finish_reason", None)
            print(f"step {step}: finish_reason={show_finish_reason(finish_reason)}")
            message, tool_calls = check_choice(choice, finish_reason, step)
            messages.append(assistant_message_from_api(message))
            last_ok = f"step {step}: Assistant Message 通过协议检查并写入历史"
            if not tool_calls:
                return message.content or ""
            for call in tool_calls:
                result = execute_tool(call)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
                name, call_id = clip(call.function.name, 60), clip(call.id, 80)
                print(f"step {step}: {name} call_id={call_id} result={result}")
                last_ok = f"step {step}: {call_id} 的 Tool Result 已写入历史"
        # 第 MAX_STEPS 次请求的工具结果只留在本地：上限负责停车，不负责收尾
        hint = "模型一直在调用工具；检查问题、模型能力，以及工具错误是否反复出现"
        raise AgentStop(HARNESS, f"超过最大步骤数：{MAX_STEPS}", hint)
    except AgentStop as stop:
        stop.last_ok = last_ok
        raise


def first_choice(response: object, step: int) -> object:
    """取出 choices[0]；没有 choices 时，转述 Provider 自己说了什么。"""
    choices = getattr(response, "choices", None)
    if isinstance(choices, list) and choices:
        return choices[0]
    if isinstance(response, list) and response:
        response = response[0]  # HTTP 200 的 JSON 列表，例如 [{"error": ...}]
    if isinstance(response, str):
        what = f"返回的不是 JSON（可能是一张网页）：{provider_text(response)}"
    elif getattr(response, "error", None) is not None:
        what = f"Provider 用 HTTP 200 返回了错误：{provider_text(response.error)}"
    else:
        what = "响应里没有 choices"
    raise AgentStop(PROVIDER, f"step {step}: {what}", HINT_BASE_URL)


def show_finish_reason(finish_reason: object) -> str:
    """正常的值原样显示；空串、null 等用 JSON 写法，免得在屏幕上看不见。"""
    if isinstance(finish_reason, str) and finish_reason:
        return clip(finish_reason, 40)
    return clip(json.dumps(finish_reason, default=repr), 40)


def check_choice(choice: object, finish_reason: object, step: int) -> tuple:
    """message 与 finish_reason 属于同一个 choice，必须一致；一致才返回 (message, tool_calls)。"""
    message = getattr(choice, "message", None)
    tool_calls = getattr(message, "tool_calls", None) or []
    if not hasattr(message, "content") or not isinstance(tool_calls, list):
        raise AgentStop(PROVIDER, f"step {step}: choice 里没有可读的 message", HINT_ENDPOINT)
    for field in ("content", "reasoning_content"):  # 这两个字段会原样回传，必须是文本
        value = getattr(message, field, None)
        if value is not None and not is_text(value):
            what = f"step {step}: message.{field} 不是能原样回传的文本（{json_type_name(value)}）"
            raise AgentStop(PROVIDER, what, HINT_ENDPOINT)
    if tool_calls and finish_reason != "tool_calls":
        raise refused_finish(finish_reason, step, with_tool_calls=True)
    if tool_calls:
        check_tool_calls(tool_calls, step)
    elif finish_reason == "tool_calls":
        what = "finish_reason=tool_calls，但消息里没有任何 Tool Call"
        raise AgentStop(PROVIDER, f"step {step}: {what}", HINT_ENDPOINT)
    elif finish_reason != "stop":
        raise refused_finish(finish_reason, step, with_tool_calls=False)
    return message, tool_calls


def refused_finish(finish_reason: object, step: int, with_tool_calls: bool) -> AgentStop:
    """length、content_filter 和未知值都不能伪装成 Tool Call 或 Final。"""
    known = isinstance(finish_reason, str) and finish_reason in FINISH_REASONS
    link, meaning, hint = FINISH_REASONS[finish_reason] if known else UNKNOWN_FINISH_REASON
    shown = clip(json.dumps(finish_reason, ensure_ascii=False, default=repr), 40)
    if with_tool_calls:
        what = f"有 Tool Call 却 finish_reason={shown}（{meaning}），两者矛盾，一个工具都没执行"
    else:
        what = f"模型没有正常结束：finish_reason={shown}（{meaning}），不能当成最终回答"
    return AgentStop(link, f"step {step}: {what}", hint)


def check_tool_calls(tool_calls: list, step: int) -> None:
    """每个调用都要能配对（非空、唯一的 id）、能读懂（type=function）；否则一个都不执行。"""
    seen = set()
    for index, call in enumerate(tool_calls, start=1):
        call_id, function = getattr(call, "id", None), getattr(call, "function", None)
        where = f"step {step}: 第 {index} 个 Tool Call"
        if not is_text(call_id) or not call_id:
            what = f"{where} 缺少 id（或 id 不是文本），Tool Result 无法配对"
            raise AgentStop(PROVIDER, what, HINT_ENDPOINT)
        if call_id in seen:
            raise AgentStop(PROVIDER, f"{where} 的 id {clip(call_id, 80)} 重复", HINT_ENDPOINT)
        seen.add(call_id)
        # name 与 arguments 必须是能原样回传的字符串；至于内容对不对，交给 Router 判断
        fields = (getattr(function, "name", None), getattr(function, "arguments", None))
        if getattr(call, "type", None) != "function" or not all(is_text(f) for f in fields):
            raise AgentStop(PROVIDER, f"{where} 不是可读的 function 调用", HINT_ENDPOINT)


# ---------------------------------------------------------------------------
# 6. 在线运行：读取环境变量，创建 OpenAI SDK 客户端（只有这里导入 openai），翻译请求失败
# ---------------------------------------------------------------------------

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_TIMEOUT_SECONDS = 60.0  # SDK 默认等 10 分钟，学习时太久
MAX_TIMEOUT_SECONDS = 3600.0
MAX_RETRIES = 1  # SDK 默认重试 2 次；配置错误（如 500 Unsupported param）重试也没用


def read_config(environ: dict) -> dict:
    """检查在线运行需要的环境变量，缺什么说什么；返回创建客户端所需的参数。"""
    for name, hint in (
        ("OPENAI_API_KEY", "本地服务（Ollama、llama.cpp）不校验 key，随便填一个即可，例如 local"),
        ("OPENAI_MODEL", "填写 Provider 上支持 Tool Calling 的模型名"),
    ):
        if not environ.get(name, "").strip():
            raise AgentStop(
                HARNESS, f"缺少环境变量 {name}", f"export {name}=...；{hint}", EXIT_USAGE
            )
    api_key = environ["OPENAI_API_KEY"].strip()
    if len(api_key) >= 8:  # 更短的通常是本地服务的占位符，遮了只会把别的字弄乱
        SECRETS.extend([api_key, json.dumps(api_key)[1:-1]])  # 后者是它在 JSON 里的写法
    if not is_text(environ["OPENAI_MODEL"]):
        raise AgentStop(
            HARNESS, "OPENAI_MODEL 含有无法编码的字符", "检查终端编码后重新设置", EXIT_USAGE
        )
    if not api_key.isascii() or any(char.isspace() for char in api_key):
        hint = "key 里混进了空格、换行或中文字符；重新复制一次"
        raise AgentStop(HARNESS, "OPENAI_API_KEY 只能是不含空白的 ASCII 字符", hint, EXIT_USAGE)
    # 显式给出默认地址：否则 SDK 会自己去读一个 export 了却为空的 OPENAI_BASE_URL
    base_url = environ.get("OPENAI_BASE_URL", "").strip() or DEFAULT_BASE_URL
    if not re.match(r"https?://", base_url):
        what = "OPENAI_BASE_URL 要以 http:// 或 https:// 开头"
        raise AgentStop(HARNESS, what, HINT_BASE_URL, EXIT_USAGE)
    if base_url.rstrip("/").endswith("/chat/completions"):
        hint = "只写到 /v1 为止，SDK 会自己拼上 /chat/completions"
        raise AgentStop(HARNESS, "OPENAI_BASE_URL 不应包含 /chat/completions", hint, EXIT_USAGE)
    raw_timeout = environ.get("OPENAI_TIMEOUT", "").strip()
    try:
        timeout = float(raw_timeout) if raw_timeout else DEFAULT_TIMEOUT_SECONDS
    except ValueError:
        timeout = 0.0
    if not 0 < timeout <= MAX_TIMEOUT_SECONDS:
        what = (
            f"OPENAI_TIMEOUT 要大于 0、不超过 {MAX_TIMEOUT_SECONDS:.0f} 秒：{clip(raw_timeout, 40)}"
        )
        raise AgentStop(HARNESS, what, "例如 export OPENAI_TIMEOUT=60", EXIT_USAGE)
    return {
        "api_key": api_key,
        "base_url": base_url,
        "timeout": timeout,
        "max_retries": MAX_RETRIES,
    }


def make_client(config: dict) -> object:
    """创建客户端：显式的超时和较小的重试次数。"""
    try:
        from openai import OpenAI
    except ImportError:
        hint = "先运行：python -m pip install -r requirements.txt"
        raise AgentStop(HARNESS, "没有安装 openai SDK", hint, EXIT_USAGE) from None
    try:
        return OpenAI(**config)
    except Exception as error:  # 例如 OPENAI_BASE_URL 里的端口不是数字
        what = f"无法创建 OpenAI 客户端：{clip(str(error))}"
        raise AgentStop(HARNESS, what, HINT_BASE_URL, EXIT_USAGE) from None


HTTP_HINTS = {
    401: "检查 OPENAI_API_KEY 是否正确、是否属于 OPENAI_BASE_URL 指向的 Provider",
    403: "这个 key 无权使用该模型或端点；检查 OPENAI_API_KEY 与账户权限",
    404: "检查 OPENAI_MODEL 的模型名；OPENAI_BASE_URL 通常要以 /v1 结尾",
    429: "触发频率限制或额度用完：检查余额与配额，稍后再试",
}
# Ollama、vLLM、llama.cpp、OpenRouter 等说“不支持工具”时的原话片段
NO_TOOLS_PHRASES = (
    "does not support tools",
    "unsupported param: tools",
    "tool choice requires",
    "tools param requires",
    "support tool use",
    "does not support function calling",
)
HINT_NO_TOOLS = (
    "这个模型或端点不支持 Tool Calling：换支持 tools 的模型"
    "（vLLM 要开启自动工具选择，llama.cpp 要加 --jinja）"
)


def request_failure(error: Exception, step: int) -> AgentStop:
    """把 SDK 的异常翻译成能照着检查的话；按属性和类名判断，自检时不必导入 openai。"""
    status, kind = getattr(error, "status_code", None), type(error).__name__
    if isinstance(status, int):
        said = provider_text(getattr(error, "body", None) or str(error))
        if any(phrase in said.lower() for phrase in NO_TOOLS_PHRASES):
            hint = HINT_NO_TOOLS
        elif status in HTTP_HINTS:
            hint = HTTP_HINTS[status]
        else:
            hint = (
                "Provider 服务端出错：稍后再试" if status >= 500 else "按 Provider 的原话检查请求"
            )
        return AgentStop(PROVIDER, f"step {step}: HTTP {status}：{said}", hint, EXIT_REQUEST_FAILED)
    if isinstance(error, json.JSONDecodeError):  # HTTP 200，但响应体被截断或为空
        what = f"step {step}: 响应体不是完整的 JSON（{clip(str(error), 80)}）"
        return AgentStop(PROVIDER, what, HINT_BASE_URL, EXIT_REQUEST_FAILED)
    cause = clip(str(error.__cause__ or error), 120)  # 例如 [Errno 111] Connection refused
    if "Timeout" in kind:
        what, hint = "请求超时", "检查网络；本地模型较慢时可调大 OPENAI_TIMEOUT（秒）"
    elif "Connection" in kind:
        what, hint = "连不上服务器", "检查 OPENAI_BASE_URL 的地址、端口，以及本地服务是否已启动"
    else:
        what, hint = "请求失败", "检查 openai 的版本与网络"
    what = f"step {step}: {what}（{kind}: {cause}）"
    return AgentStop(SDK_NETWORK, what, hint, EXIT_REQUEST_FAILED)


def provider_text(body: object) -> str:
    """从各种错误体里取出 Provider 的原话：JSON 对象、JSON 列表、其他信封或 HTML。"""
    if isinstance(body, list) and body:
        body = body[0]  # Gemini 兼容端点把错误包在列表里
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict):
            return clip(inner.get("message") or inner)
        return clip(inner)
    if isinstance(body, str):
        title = re.search(r"<title>(.*?)</title>", body, re.IGNORECASE | re.DOTALL)
        text = title.group(1) if title else re.sub(r"<[^>]+>", " ", body)
        return clip(re.sub(r"\s+", " ", text)) or "（空响应体）"
    return clip(body)


# ---------------------------------------------------------------------------
# 6. 自检：用与 SDK 响应同形的假对象，离线验证本课的每条规则
# ---------------------------------------------------------------------------


class SelfCheckFailed(Exception):
    """某项自检没有通过。"""


def expect(condition: bool, what: str) -> None:
    """代替 assert：python -O 会删掉 assert，这个函数不会。"""
    if not condition:
        raise SelfCheckFailed(what)


def fake_call(
    call_id: object, arguments: str = '{"a":248,"b":15}', name: str = "multiply"
) -> object:
    """形状同 SDK 的 ChatCompletionMessageToolCall：call.id / .type / .function.name。"""
    function = SimpleNamespace(name=name, arguments=arguments)
    return SimpleNamespace(id=call_id, type="function", function=function)


def fake_response(
    finish_reason: object, content: object = None, tool_calls: object = None
) -> object:
    """形状同 SDK 的 ChatCompletion：response.choices[0].message / .finish_reason。"""
    message = SimpleNamespace(role="assistant", content=content, tool_calls=tool_calls)
    return SimpleNamespace(choices=[SimpleNamespace(message=message, finish_reason=finish_reason)])


class FakeClient:
    """按顺序返回预设响应，并记下每次请求参数的快照（SDK 也在调用时序列化）。"""

    def __init__(self, *responses: object):
        self.responses, self.requests = list(responses), []
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self.create))

    def create(self, **kwargs: object) -> object:
        self.requests.append(copy.deepcopy(kwargs))
        return self.responses.pop(0)


def run_fake(*responses: object) -> tuple:
    """用假客户端跑一次 Loop，返回 (回答或 AgentStop, 客户端, 历史, 打印的行)。"""
    client, messages, out = FakeClient(*responses), [], io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            outcome = run_agent(client, "fake-model", DEFAULT_QUESTION, messages)
        except AgentStop as stop:
            outcome = stop
    return outcome, client, messages, out.getvalue().splitlines()


def check_multiply() -> None:
    expect(multiply(248, 15) == 3720, "multiply(248, 15) 应为 3720")
    bad = [(True, 15), (248, False), ("248", 15), (248.0, 15), (None, 15), (MAX_ABS_VALUE + 1, 2)]
    for a, b in bad:
        try:
            multiply(a, b)
        except ValueError:
            continue
        raise SelfCheckFailed(f"multiply({a!r}, {b!r}) 应被拒绝")


def check_router() -> None:
    ok = execute_tool(fake_call("call_1"))
    expect(ok == '{"status":"completed","result":3720}', f"成功结果应是紧凑 JSON，实际 {ok}")
    bad_arguments = {
        "多余的键": '{"a":248,"b":15,"c":1}',
        "缺少的键": '{"a":248}',
        "重复的键": '{"a":1,"a":248,"b":15}',
        "坏 JSON": '{"a":248,',
        "非对象 JSON": "[248, 15]",
        "空字符串": "",
        "字符串数字": '{"a":"248","b":15}',
        "布尔值": '{"a":true,"b":15}',
        "深嵌套": "[" * 100_000,
    }
    for label, arguments in bad_arguments.items():
        result = json.loads(execute_tool(fake_call("call_x", arguments)))
        expect(result["status"] == "error", f"{label} 应得到受控错误，实际 {result}")
    unknown = json.loads(execute_tool(fake_call("call_x", name="delete_files")))
    expect(unknown["status"] == "error" and "delete_files" in unknown["message"], "未知工具应受控")


ARTICLE_STEP_LINES = [
    "step 1: finish_reason=tool_calls",
    'step 1: multiply call_id=call_1 result={"status":"completed","result":3720}',
    "step 2: finish_reason=stop",
]


def check_happy_path() -> None:
    final = "248 乘以 15 等于 3720。"
    outcome, client, messages, lines = run_fake(
        fake_response("tool_calls", tool_calls=[fake_call("call_1")]),
        fake_response("stop", content=final),
    )
    expect(outcome == final and len(client.requests) == 2, f"应两次请求后得到回答：{outcome}")
    expect(
        set(client.requests[0]) == {"model", "messages", "tools"}, "请求只带 model/messages/tools"
    )
    sent = client.requests[1]["messages"][-1]
    want = {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": '{"status":"completed","result":3720}',
    }
    expect(sent == want, f"第二次请求应带 call_1 的结果 3720，实际 {sent}")
    roles = [m["role"] for m in messages]
    expect(roles == ["user", "assistant", "tool", "assistant"], f"消息序列不对：{roles}")
    expect(messages[1]["content"] == "", "content 为 null 时应存成空字符串")
    expect(lines == ARTICLE_STEP_LINES, f"打印的步骤行与课文不同：{lines}")


def check_parallel_calls() -> None:
    two_calls = [fake_call("call_1"), fake_call("call_2", '{"a":6,"b":7}')]
    _, _, messages, _ = run_fake(
        fake_response("tool_calls", tool_calls=two_calls), fake_response("stop", content="好")
    )
    pairs = [(m["tool_call_id"], json.loads(m["content"])["result"]) for m in messages[2:4]]
    expect(pairs == [("call_1", 3720), ("call_2", 42)], f"并行调用应按 id 配对：{pairs}")


def check_refused_responses() -> None:
    cases = {
        "finish_reason=length": fake_response("length", content="248 乘以 15 等于"),
        "finish_reason=content_filter": fake_response("content_filter", content="..."),
        "未知 finish_reason": fake_response("eos", content="3720"),
        "Tool Call + length": fake_response("length", tool_calls=[fake_call("call_1", '{"a":2')]),
        "Tool Call + stop": fake_response("stop", tool_calls=[fake_call("call_1")]),
        "缺少 id": fake_response("tool_calls", tool_calls=[fake_call(None)]),
        "重复 id": fake_response("tool_calls", tool_calls=[fake_call("c1"), fake_call("c1")]),
        "tool_calls 为空": fake_response("tool_calls", tool_calls=[]),
        "choices 为空": SimpleNamespace(choices=[]),
    }
    for label, response in cases.items():
        outcome, client, messages, _ = run_fake(response)
        expect(isinstance(outcome, AgentStop), f"{label} 应停下 Loop，实际返回 {outcome!r}")
        expect(len(messages) == 1 and len(client.requests) == 1, f"{label} 不应执行或记入任何东西")


def check_max_steps() -> None:
    calls = [[fake_call(f"call_{n}")] for n in range(1, MAX_STEPS + 2)]
    outcome, client, messages, _ = run_fake(
        *[fake_response("tool_calls", tool_calls=c) for c in calls]
    )
    expect(
        getattr(outcome, "reason", "") == f"超过最大步骤数：{MAX_STEPS}",
        f"应停在步数上限：{outcome}",
    )
    expect(len(client.requests) == MAX_STEPS, f"应正好发出 {MAX_STEPS} 次请求")
    last = f"call_{MAX_STEPS}"
    expect(messages[-1].get("tool_call_id") == last, "最后一次工具结果应写入本地历史")
    sent_ids = [m.get("tool_call_id") for m in client.requests[-1]["messages"]]
    expect(last not in sent_ids, "最后一次工具结果不应发给模型")


def check_reasoning_content() -> None:
    first = fake_response("tool_calls", tool_calls=[fake_call("functions.multiply:0")])
    first.choices[0].message.reasoning_content = "先调用乘法工具"
    first.choices[0].message.reasoning = "私有字段"
    _, client, _, lines = run_fake(first, fake_response("stop", content="3720"))
    echoed = client.requests[1]["messages"][1]
    expect(echoed.get("reasoning_content") == "先调用乘法工具", "reasoning_content 应原样回传")
    expect("reasoning" not in echoed, "其他私有字段不应回传")
    expect(echoed["tool_calls"][0]["id"] == "functions.multiply:0", "id 应原样回传")
    expect(not any("先调用" in line for line in lines), "reasoning 不应打印")


SELF_CHECKS = [
    ("multiply 拒绝 bool、字符串、小数、None 和超范围的值", check_multiply),
    ("Router 把坏 JSON、多余/缺少/重复的键、未知工具变成受控错误", check_router),
    ("两次请求跑通，第二次请求带 call_1 与 3720", check_happy_path),
    ("并行的两个 Tool Call 按 id 配对", check_parallel_calls),
    ("length、content_filter、矛盾或缺 id 的响应不执行、不被当成 Final", check_refused_responses),
    ("MAX_STEPS 限制请求次数，最后的结果不发给模型", check_max_steps),
    ("reasoning_content 原样回传，不打印", check_reasoning_content),
]


def self_check() -> int:
    """逐项运行自检；失败时指出是哪一项，退出码 1。"""
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


# ---------------------------------------------------------------------------
# main：解析参数、运行，把 AgentStop 变成用户读的两行和退出码
# ---------------------------------------------------------------------------

USAGE = '用法：python lesson_03_tool_calling_loop.py [--self-check] [--show-messages] ["问题"]'


def main(argv: list, environ: dict) -> int:
    """命令行入口，返回退出码。"""
    # 像 -x、--show-messages 这样的才是选项；问题本身可以以 - 开头，例如 "-7 乘以 6"
    flags = [arg for arg in argv if re.fullmatch(r"--?[A-Za-z][\w-]*", arg)]
    words = [arg for arg in argv if arg not in flags]
    if "-h" in flags or "--help" in flags:
        print(USAGE)
        return EXIT_OK
    unknown = [flag for flag in flags if flag not in ("--self-check", "--show-messages")]
    # 终端编码不对时，argv 里会混进无法按 UTF-8 发出去的字符
    if unknown or len(words) > 1 or not all(is_text(word) and word.strip() for word in words):
        print(f"参数错误：{clip(unknown or words, 80)}\n{USAGE}", file=sys.stderr)
        return EXIT_USAGE
    if "--self-check" in flags:
        return self_check()

    messages, question = [], words[0] if words else DEFAULT_QUESTION
    SECRETS.clear()
    try:
        client = make_client(read_config(environ))
        answer = run_agent(client, environ["OPENAI_MODEL"].strip(), question, messages)
        # 回答里的终端控制字符（改标题、清屏）不该作用到学习者的终端；换行保留
        print(redact("Agent> " + re.sub(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", "", answer)))
        code = EXIT_OK
    except AgentStop as stop:
        last_ok = f"最后一个成功事件：{stop.last_ok}；" if stop.last_ok else ""
        print(f"[{stop.link}] {stop.reason}\n{last_ok}建议：{stop.hint}", file=sys.stderr)
        code = stop.exit_code
    except KeyboardInterrupt:
        print("已中断（Ctrl-C）", file=sys.stderr)
        code = 130
    if "--show-messages" in flags and messages:
        # reasoning_content 要回传给 Provider，但不打印给人看
        shown = [
            {**m, "reasoning_content": "（已省略）"} if "reasoning_content" in m else m
            for m in messages
        ]
        print(redact(json.dumps(shown, ensure_ascii=False, indent=2)))
    return code


if __name__ == "__main__":
    for stream in (sys.stdout, sys.stderr):
        # 终端编码不支持的字符不该让打印崩溃；IDLE 等环境的输出流没有 reconfigure
        getattr(stream, "reconfigure", lambda **_: None)(errors="backslashreplace")
    try:
        sys.exit(main(sys.argv[1:], dict(os.environ)))
    except BrokenPipeError:  # 例如输出接到 head：读的一方先走了，不算错误
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(EXIT_OK)
