"""Banner 字节变成回复: a 2xx's bytes become a reply in one gate, read_reply().

The gate hands the loop exactly the fields it reads (the spec REPLY/MESSAGE/CALL), each with its
type, and nothing else but the opaque fields the provider wants back. Whatever the provider sent
that the loop cannot read - not UTF-8, empty, not strict JSON, nested past what can be sent back,
or not the shape the loop reads - is the provider's failure: exit 3, link [Provider], under the
real 2xx status. Bytes the HTTP library itself cannot read (a lying Content-Encoding, a body cut
off before its Content-Length) never reach the gate: the SDK reads the body inside its own call,
so they end as its failure, exit 3, link [SDK/网络], quoting the library's words. Every body
without a choice to read (`{}`, `{"choices": []}`, an error in choices[0] ...) ends as the
provider's failure, quoting the provider's words.
What the gate lets through is the loop's to judge (an answer, exit 0, or a stop, exit 1). And the
gate catches only what the provider sent: a harness bug elsewhere still shows its traceback.

Over real HTTP through the real SDK where its HTTP library is the point (decompression,
framing); read_reply fed bytes directly where it is not.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import gzip
import importlib.util
import io
import json
import re
import string
import sys
import threading
import zlib

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import lesson_03_tool_calling_loop as lesson
from tests.provider_server import ProviderServer, Reply, broken_off, completion, tool_call
from tests.runs import Run

KEY = "sk-gate-secret-5e4d3c2b1a09f8e7"
BUG_LINE = "[Harness] 程序自身出错了"
REPORT_HEAD = re.compile(r"\[(Harness|SDK/网络|Provider|Model)\] ")
CALL = tool_call("call_1", "multiply", '{"a":248,"b":15}')
TOOL_TURN = completion(tool_calls=[CALL], finish_reason="tool_calls")
FINAL = completion(content="248 乘以 15 等于 3720。")
FINAL_BYTES = json.dumps(FINAL, ensure_ascii=False).encode()


def as_bytes(value) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode()


# --- bodies the SDK's HTTP library has to decompress ---------------------------------------


def brotli_stored(data: bytes) -> bytes:
    """data as a valid brotli stream without the brotli package: uncompressed meta-blocks
    (RFC 7932 section 9.2), bits packed from the least significant end."""
    out, bits = bytearray(), [0]  # WBITS: one 0 bit, a 64 KiB window

    def to_bytes() -> None:
        bits.extend([0] * (-len(bits) % 8))
        out.extend(
            sum(bit << n for n, bit in enumerate(bits[k : k + 8])) for k in range(0, len(bits), 8)
        )
        bits.clear()

    for start in range(0, len(data), 1 << 16):
        chunk = data[start : start + (1 << 16)]
        bits.extend([0, 0, 0])  # ISLAST = 0, MNIBBLES = 4
        bits.extend(((len(chunk) - 1) >> n) & 1 for n in range(16))  # MLEN - 1
        bits.append(1)  # ISUNCOMPRESSED; the bytes follow from the next byte boundary
        to_bytes()
        out.extend(chunk)
    bits.extend([1, 1])  # ISLAST, ISLASTEMPTY
    to_bytes()
    return bytes(out)


BROTLI_DECODER = any(importlib.util.find_spec(name) for name in ("brotli", "brotlicffi"))


def encoded(body: bytes, coding: str, content_type: str = "application/json") -> Reply:
    """body as it is, labelled with this Content-Encoding (true or not)."""
    return Reply(body=body, content_type=content_type, headers={"Content-Encoding": coding})


# --- running main() against a server ---------------------------------------------------------


@pytest.fixture(scope="module")
def server():
    """One server for a module's runs: hypothesis runs many examples in one test."""
    with ProviderServer() as running:
        yield running


def run_main(server, *replies, show=False) -> Run:
    """main() in this process, the real SDK over real HTTP to `server`, which answers `replies`
    and then FINAL to any later request. Output is captured here: hypothesis cannot reset
    pytest's function-scoped capsys between examples."""
    server.script(*replies, FINAL)
    environ = {"OPENAI_API_KEY": KEY, "OPENAI_MODEL": "m", "OPENAI_BASE_URL": server.base_url}
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = lesson.main(["--show-messages"] if show else [], environ)
    return Run(code, out.getvalue(), err.getvalue())


def ending(result: Run) -> tuple:
    """How a run ended: (exit code, the link its report names); (0, "") for an answer."""
    if result.code == 0:
        return 0, ""
    head = result.err_lines[-2] if len(result.err_lines) >= 2 else ""  # the report ends err
    named = REPORT_HEAD.match(head)
    return result.code, named[1] if named else None


def assert_no_traceback_and_no_key(result: Run) -> None:
    assert BUG_LINE not in result.everything, result.everything
    assert "Traceback" not in result.everything, result.everything
    assert KEY not in result.everything and "\x1b" not in result.everything, result.everything


def assert_an_answer_a_stop_or_the_providers_failure(result: Run) -> None:
    assert_no_traceback_and_no_key(result)
    outcome = ending(result)
    endings = {(0, ""), (1, "Harness"), (1, "Provider"), (1, "Model"), (3, "Provider")}
    assert outcome in endings | {(3, "SDK/网络")}, result.everything
    if outcome == (0, ""):  # an answer; after a tool ran, with at most the written-call note
        assert "Agent> " in result.out, result.everything
        assert len(result.err_lines) <= (1 if "call_id=" in result.out else 0), result.everything


# --- the property: no provider response gets past the gate unread or crashes it ------------

SAFE_TEXT = st.text(string.ascii_letters + string.digits + " 乘以等于。", max_size=12)
ODD_VALUE = st.sampled_from(
    [3720, [{"type": "text", "text": "3"}], {"a": 1}, None, True, 0, -1.5, "", "x", [], {}, [1]]
).map(copy.deepcopy)  # each drawn container a new one: placed twice, it is still no cycle
ODD_TEXT = st.sampled_from(["", " \u200b", "<think>3720</think>", "\x1b]0;x\x07", KEY, "3720"])
WELL_FORMED_CALLS = st.sampled_from(
    [None, [], [CALL], [CALL, tool_call("call_2", "multiply", '{"a":6,"b":7}')]]
)


@st.composite
def well_formed(draw) -> dict:
    """A reply in the protocol's shape, with extra provider fields where it leaves room."""
    content = draw(st.none() | SAFE_TEXT | ODD_TEXT | st.text(max_size=8))
    finish_reason = draw(st.sampled_from(["stop", "stop", "tool_calls", "length", None, "eos"]))
    body = completion(content, draw(WELL_FORMED_CALLS), finish_reason)
    body = copy.deepcopy(body)  # CALL is shared; a break below must not change it
    if draw(st.booleans()):
        body.update(system_fingerprint="fp_1", service_tier=None, prompt_logprobs=None)
        body["choices"][0].update(native_finish_reason=finish_reason, error=None)
        body["choices"][0]["message"].update(annotations=[], refusal=None, audio=None)
    if draw(st.booleans()):
        body["choices"][0]["message"]["reasoning_content"] = draw(SAFE_TEXT)
    return body


CALL_PATH = ("choices", 0, "message", "tool_calls", 0)
# Where a reply can be broken, the fields the loop reads first (hypothesis favours early entries)
PLACES = [
    ("choices", 0, "message", "content"),
    ("choices", 0, "message", "tool_calls"),
    (*CALL_PATH, "function", "arguments"),
    (*CALL_PATH, "type"),
    (*CALL_PATH, "function"),
    (*CALL_PATH, "function", "name"),
    (*CALL_PATH, "id"),
    CALL_PATH,
    ("choices", 0, "message"),
    ("choices", 0, "finish_reason"),
    ("choices", 0, "message", "refusal"),
    ("choices", 0, "error"),
    ("choices", 0),
    ("choices",),
    (),  # the whole body
]
REMOVED = object()


@st.composite
def malformed(draw) -> object:
    """A well-formed reply with one or two places replaced by an odd value, or removed."""
    body = draw(well_formed())
    places = draw(st.lists(st.sampled_from(PLACES), min_size=1, max_size=2))
    if any(place[:5] == CALL_PATH for place in places):  # a call to break
        body["choices"][0]["message"]["tool_calls"] = copy.deepcopy([CALL])
    for place in places:
        if not place:
            return draw(ODD_VALUE)  # the whole body: a list, a string, a number, null
        value = REMOVED if draw(st.integers(0, 5)) == 0 else draw(ODD_VALUE)
        if place[-1] == "error":
            value = {"message": draw(SAFE_TEXT), "code": 502}
        with contextlib.suppress(LookupError, TypeError, AttributeError):
            parent = functools.reduce(lambda node, step: node[step], place[:-1], body)
            if value is REMOVED:
                del parent[place[-1]]
            else:
                parent[place[-1]] = value
    return body


# Literals that only hand-written JSON has, put where the marker "@@" stands
MARK = "@@"
LITERALS = st.sampled_from(["NaN", "Infinity", "-Infinity", "1e999", '"\\ud800"', "9" * 5000])


def nested_text(levels: int) -> str:
    return "[" * levels + "0" + "]" * levels


@st.composite
def body_bytes(draw) -> bytes:
    """The bytes of a 200 body: a reply, well-formed or not, written oddly or not, or not JSON."""
    kinds = ["well-formed", "malformed", "malformed", "malformed", "marked", "not utf-8"]
    kind = draw(st.sampled_from([*kinds, "bytes", "text"]))
    if kind == "bytes":
        return draw(st.binary(max_size=80))
    if kind == "text":  # what a proxy, a web page or a stream endpoint sends instead
        pages = [b"", b" \r\n", b"<html><title>502 Bad Gateway</title></html>", b"OK"]
        pages += [b"data: " + FINAL_BYTES + b"\n\ndata: [DONE]\n\n", FINAL_BYTES[:-9]]
        return draw(st.sampled_from(pages))
    drawn = {"well-formed": well_formed(), "malformed": malformed()}
    value = draw(drawn.get(kind, well_formed() | malformed()))
    if kind == "not utf-8":  # Chinese as a GBK server writes it, UTF-16, a raw surrogate
        text = json.dumps(value, ensure_ascii=False)
        coding = draw(st.sampled_from(["gbk", "utf-16", "latin-1", "surrogates"]))
        if coding == "surrogates":
            return text.replace("3720", "37\ud80020").encode("utf-8", "surrogatepass")
        return text.encode(coding, "replace")
    if kind == "marked" and isinstance(value, dict):
        target = value
        with contextlib.suppress(LookupError, TypeError):
            target = value["choices"][0]["message"] if draw(st.booleans()) else value
        if isinstance(target, dict):
            target["reasoning_details"] = MARK  # a field the loop keeps and sends back
        depth = st.integers(0, 1_200) | st.just(50_000)  # up to the parser's limit, and past it
        literal = draw(LITERALS | depth.map(nested_text))
        text = json.dumps(value, ensure_ascii=draw(st.booleans())).replace(f'"{MARK}"', literal)
    else:
        text = json.dumps(value, ensure_ascii=draw(st.booleans()))
    bom = "\ufeff" if draw(st.integers(0, 4)) == 0 else ""
    return (bom + text).encode("utf-8", "surrogatepass")


TRANSPORTS = [
    *["as is"] * 4,  # most bodies reach the gate as they were written
    "gzip",
    "deflate",
    "brotli",
    "says gzip, is not",
    "says deflate, is garbage",
    "says br, is not",
    "an unknown coding",
    "gzip, unsaid",
    "cut off",
]


@st.composite
def provider_replies(draw) -> Reply:
    """One HTTP 200: the body, compressed or not, labelled truly or not, or cut off."""
    body = draw(body_bytes())
    content_type = draw(st.sampled_from(["application/json", "text/html", "text/event-stream"]))
    how = draw(st.sampled_from(TRANSPORTS))
    if how == "as is":
        return Reply(body=body, content_type=content_type)
    if how == "gzip":
        return encoded(gzip.compress(body), "gzip", content_type)
    if how == "deflate":
        return encoded(zlib.compress(body), "deflate", content_type)
    if how == "brotli":  # decoded where brotli is installed, passed on as bytes where not
        return encoded(brotli_stored(body), "br", content_type)
    if how == "says gzip, is not":
        return encoded(body, "gzip", content_type)
    if how == "says deflate, is garbage":
        return encoded(draw(st.binary(min_size=1, max_size=40)), "deflate", content_type)
    if how == "says br, is not":
        return encoded(body, "br", content_type)
    if how == "an unknown coding":
        return encoded(body, draw(st.sampled_from(["zstd", "compress", "x-snappy"])))
    if how == "gzip, unsaid":
        return Reply(body=gzip.compress(body), content_type=content_type)
    return broken_off(body)  # Content-Length promises more than comes


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(reply=provider_replies(), show=st.booleans())
@example(reply=Reply(json={}), show=False)
@example(reply=Reply(json={"choices": []}), show=False)
@example(reply=Reply(json={"choices": {"0": FINAL["choices"][0]}}), show=False)
@example(reply=Reply(json={"choices": 1}), show=True)
@example(reply=encoded(b"\x8b\x00 not brotli", "br"), show=False)
@example(reply=encoded(FINAL_BYTES, "gzip"), show=False)
@example(reply=encoded(b"\x00\xff not deflate", "deflate"), show=False)
@example(reply=Reply(body=FINAL_BYTES.replace(b'"index": 0', b'"index": NaN')), show=True)
@example(reply=Reply(body=b"\xef\xbb\xbf" + FINAL_BYTES), show=False)
@example(reply=Reply(body=b"[" * 50_000 + b"]" * 50_000), show=False)
@example(reply=Reply(body=b""), show=True)
def test_every_provider_reply_ends_as_an_answer_a_stop_or_the_providers_failure(
    server, reply, show
):
    assert_an_answer_a_stop_or_the_providers_failure(run_main(server, reply, show=show))


NO_CHOICE = [
    {},
    {"choices": []},
    {"choices": None},
    {"choices": {}},
    {"choices": {"0": FINAL["choices"][0]}},
    {"choices": 0},
    {"choices": "stop"},
    {"choices": [None]},
    {"choices": [[]]},
    {"choices": [3720]},
    {"choices": [{"error": {"message": "upstream model crashed", "code": 502}}]},
    {"choices": [{**FINAL["choices"][0], "error": {"message": "stream cut", "code": 502}}]},
]


@st.composite
def bodies_without_a_choice(draw) -> dict:
    body = copy.deepcopy(draw(st.sampled_from(NO_CHOICE)))
    if draw(st.booleans()):  # the envelope around it, as a provider sends it
        body.update(id="chatcmpl-1", object="chat.completion", model="m", created=1)
        body["usage"] = {"prompt_tokens": 1, "completion_tokens": 0, "total_tokens": 1}
    return body


@settings(max_examples=30, deadline=None)
@given(body=bodies_without_a_choice())
@example(body={"choices": []})
def test_every_body_without_a_choice_ends_as_an_empty_object_does(server, body):
    empty_object = ending(run_main(server, Reply(json={})))
    result = run_main(server, Reply(json=body))
    assert ending(result) == empty_object == (3, "Provider"), result.everything
    assert "Traceback" not in result.everything


def choice_error(body: dict) -> dict:
    """body with OpenRouter's mid-generation error inside choices[0], finish_reason "error"."""
    body = copy.deepcopy(body)
    body["choices"][0].update(finish_reason="error", error={"message": "WORDS", "code": 502})
    return body


WITHOUT_A_CHOICE = {  # bodies that carry the provider's words instead of a choice to read
    "only an error (OpenRouter)": {"error": {"message": "WORDS", "code": 502}},
    "an error beside empty choices": {"choices": [], "error": {"message": "WORDS"}},
    "an error in choices[0]": {"choices": [{"index": 0, "error": {"message": "WORDS"}}]},
    "an error in a whole choices[0] (OpenRouter)": choice_error(completion(content="")),
    "an error beside a call": choice_error(TOOL_TURN),
    "base_resp": {
        "id": "",
        "choices": None,
        "base_resp": {"status_code": 1, "status_msg": "WORDS"},
    },
    "error_msg": {"error_code": 110, "error_msg": "WORDS"},
}


@pytest.mark.parametrize("body", WITHOUT_A_CHOICE.values(), ids=WITHOUT_A_CHOICE.keys())
def test_a_body_without_a_choice_quotes_the_providers_words(server, body):
    words = "quota for this model used up"
    requests_before = len(server.requests)
    result = run_main(server, Reply(json=json.loads(json.dumps(body).replace("WORDS", words))))
    assert ending(result) == (3, "Provider"), result.everything
    assert result.err_lines[0].startswith("[Provider] step 1: HTTP 200"), result.err
    assert words in result.err_lines[0], result.err
    assert "call_id=" not in result.out and len(server.requests) == requests_before + 1


def call_with(**changes) -> dict:
    call = copy.deepcopy(CALL)
    for path, value in changes.items():
        *parents, last = path.split("__")
        parent = functools.reduce(lambda node, step: node[step], parents, call)
        if value is REMOVED:
            del parent[last]
        else:
            parent[last] = value
    return call


def with_message(**fields) -> dict:
    body = copy.deepcopy(FINAL)
    body["choices"][0]["message"] = {"role": "assistant", **fields}
    return body


def with_call(**changes) -> dict:
    return completion(tool_calls=[call_with(**changes)], finish_reason="tool_calls")


# Each shape the issue names, as a provider would send it, and the field path the report names:
# the loop could read none of them
NAMED_SHAPES = {
    "choices missing": ({"id": "chatcmpl-1", "object": "chat.completion"}, "choices "),
    "choices []": ({"choices": []}, "choices "),
    "choices an object": ({"choices": {"0": FINAL["choices"][0]}}, ".choices "),
    "choices a number": ({"choices": 1}, ".choices "),
    "message not an object": (
        {"choices": [{"index": 0, "message": "3720"}]},
        ".choices[].message ",
    ),
    "content a list": (
        with_message(content=[{"type": "text", "text": "3720"}]),
        "choices[].message.content ",
    ),
    "content a number": (with_message(content=3720), "choices[].message.content "),
    "tool_calls an object": (
        with_message(content=None, tool_calls={"0": CALL}),
        "message.tool_calls ",
    ),
    "tool_calls a number": (with_message(content=None, tool_calls=3720), "message.tool_calls "),
    "a call a string": (with_message(content=None, tool_calls=["multiply"]), "tool_calls[] "),
    "a call without function": (with_call(function=REMOVED), "tool_calls[].function "),
    "a custom tool call": (
        with_call(type="custom", function=REMOVED, custom={"name": "multiply", "input": "2"}),
        "tool_calls[].type ",
    ),
    "arguments not a string": (
        with_call(function__arguments={"a": 248, "b": 15}),
        "function.arguments ",
    ),
    "name missing": (with_call(function__name=REMOVED), "function.name "),
    "type not function": (with_call(type="custom"), "tool_calls[].type "),
    "choices[0].error": (
        {"choices": [{**FINAL["choices"][0], "error": {"message": "cut"}}]},
        "choices[].error ",
    ),
}


@pytest.mark.parametrize(("body", "path"), NAMED_SHAPES.values(), ids=NAMED_SHAPES.keys())
def test_every_named_malformed_shape_is_the_providers_failure_and_runs_nothing(server, body, path):
    requests_before = len(server.requests)
    result = run_main(server, Reply(json=body))
    assert ending(result) == (3, "Provider"), result.everything
    first = result.err_lines[0]
    assert first.startswith("[Provider] step 1: HTTP 200"), result.err
    assert path in first.split("：")[0], first  # the offending field, before the body's quote
    assert "call_id=" not in result.out and "Agent>" not in result.out
    assert len(server.requests) == requests_before + 1  # nothing more was sent


@pytest.mark.parametrize(
    ("status", "body"),
    [(201, {}), (203, with_message(content=3720)), (202, b"<html>Accepted</html>"), (206, b"")],
)
def test_a_2xx_other_than_200_is_reported_with_its_own_status(server, status, body):
    reply = Reply(status=status, json=body) if isinstance(body, dict) else Reply(status, body=body)
    result = run_main(server, reply)
    assert ending(result) == (3, "Provider"), result.everything
    assert result.err_lines[0].startswith(f"[Provider] step 1: HTTP {status}，"), result.err
    assert "HTTP 200" not in result.err


# --- compressed bodies, one by one -----------------------------------------------------------

COMPRESSED = {
    "gzip": (encoded(gzip.compress(FINAL_BYTES), "gzip"), (0, "")),
    "deflate": (encoded(zlib.compress(FINAL_BYTES), "deflate"), (0, "")),
    "says gzip, is plain JSON": (encoded(FINAL_BYTES, "gzip"), (3, "SDK/网络")),
    "says deflate, is garbage": (encoded(b"\x00\xff not deflate", "deflate"), (3, "SDK/网络")),
    "says gzip twice, is once": (
        encoded(gzip.compress(FINAL_BYTES), "gzip, gzip"),
        (3, "SDK/网络"),
    ),
    "gzip, unsaid": (Reply(body=gzip.compress(FINAL_BYTES)), (3, "Provider")),
    "says br, is not brotli": (  # the library's error, or passed on as bytes where not brotli
        encoded(b"\x8b\x00 not brotli", "br"),
        (3, "SDK/网络") if BROTLI_DECODER else (3, "Provider"),
    ),
    "brotli": (
        encoded(brotli_stored(FINAL_BYTES), "br"),
        (0, "") if BROTLI_DECODER else (3, "Provider"),  # decoded, or passed on as bytes
    ),
}


@pytest.mark.parametrize(("reply", "outcome"), COMPRESSED.values(), ids=COMPRESSED.keys())
def test_a_compressed_body_is_read_when_it_is_what_it_says_and_refused_when_not(
    server, reply, outcome
):
    result = run_main(server, reply)
    assert ending(result) == outcome, result.everything
    assert "Traceback" not in result.everything
    if outcome == (0, ""):
        assert result.out.splitlines()[-1] == "Agent> 248 乘以 15 等于 3720。"
    elif outcome == (3, "Provider"):  # the bytes as they came are quoted
        assert result.err_lines[0].startswith("[Provider] step 1: HTTP 200"), result.err
    else:  # the library could not decode them: its words, the endpoint it was reading from
        assert "DecodingError" in result.err_lines[0], result.err
        assert f"连上了 127.0.0.1:{server.port}" in result.err_lines[0], result.err


def test_the_brotli_test_body_is_a_brotli_stream():
    # the hand-made stream, checked where a decoder is at hand
    if BROTLI_DECODER:
        brotli = importlib.import_module(
            "brotli" if importlib.util.find_spec("brotli") else "brotlicffi"
        )
        for data in (b"", FINAL_BYTES, bytes(range(256)) * 600):
            assert brotli.decompress(brotli_stored(data)) == data
    assert brotli_stored(b"") == b"\x06"  # WBITS 0, ISLAST 1, ISLASTEMPTY 1


# --- read_reply fed bytes directly: what the loop gets, and where the lines are --------------


def refused(body: bytes, status: int = 200) -> lesson.RequestFailed:
    with pytest.raises(lesson.RequestFailed) as caught:
        lesson.read_reply(body, status)
    stop = caught.value
    assert (stop.link, stop.exit_code) == ("Provider", 3), stop.reason
    return stop


# What part 1 reads, and nothing else: a field's name -> the type(s) its value has. Objects the
# loop reads by attribute are dicts here; the opaque fields the provider wants back are `object`.
NONE = type(None)
FUNCTION_READ = {"name": str, "arguments": str}
CALL_READ = {"id": (str, NONE), "type": str, "function": FUNCTION_READ, "extra_content": object}
MESSAGE_READ = {
    "content": (str, NONE),
    "refusal": object,
    "tool_calls": [CALL_READ],
    "reasoning_content": object,
    "reasoning_details": object,
}
REPLY_READ = {"choices": [{"finish_reason": (str, NONE), "error": NONE, "message": MESSAGE_READ}]}


def assert_read_as(value, read, sent, where="reply") -> None:
    """value (from read_reply) has exactly the fields of `read`, each of its type and equal to
    what was sent (None where nothing was, [] for a list that was not)."""
    if isinstance(read, dict):
        assert set(vars(value)) == set(read), (where, vars(value))
        for name, kind in read.items():
            given = sent.get(name) if isinstance(sent, dict) else None
            assert_read_as(getattr(value, name), kind, given, f"{where}.{name}")
    elif isinstance(read, list):
        assert isinstance(value, list) and len(value) == len(sent or []), (where, value)
        for item, given in zip(value, sent or []):
            assert_read_as(item, read[0], given, f"{where}[]")
    else:
        assert isinstance(value, read) and value == sent, (where, value, sent)


@st.composite
def with_extra_fields(draw) -> dict:
    """A well-formed reply, and fields the loop does not read on each object of it."""
    body = draw(well_formed())
    extra = st.dictionaries(st.sampled_from(["index", "x_extra", "role", "usage"]), ODD_VALUE)
    choice = body["choices"][0]
    for node in [body, choice, choice["message"], *(choice["message"].get("tool_calls") or [])]:
        node.update(draw(extra))
    for call in choice["message"].get("tool_calls") or []:
        call["function"].update(draw(extra))
        if draw(st.booleans()):
            call["extra_content"] = {"google": {"thought_signature": draw(SAFE_TEXT)}}
    if draw(st.booleans()):
        choice["message"]["reasoning_details"] = [{"type": "reasoning.text", "text": "x"}]
    return body


@given(body=with_extra_fields())
@example(body=copy.deepcopy(TOOL_TURN))
@example(body=with_message())  # a message with no field the loop reads: all None, no calls
def test_read_reply_hands_the_loop_exactly_the_fields_it_reads_each_of_its_type(body):
    reply = lesson.read_reply(as_bytes(body))
    assert_read_as(reply, REPLY_READ, body)


def test_fields_the_loop_reads_that_the_provider_left_out_are_none_or_empty():
    body = with_message()  # only "role"
    body["choices"][0].pop("finish_reason")
    message = lesson.read_reply(as_bytes(body)).choices[0].message
    assert (message.content, message.refusal, message.tool_calls) == (None, None, [])
    assert (message.reasoning_content, message.reasoning_details) == (None, None)
    call = lesson.read_reply(as_bytes(with_call(id=REMOVED))).choices[0].message.tool_calls[0]
    assert (call.id, call.extra_content) == (None, None)


def test_provider_fields_the_loop_does_not_read_are_not_carried_except_the_echoed_ones():
    body = copy.deepcopy(TOOL_TURN)
    body.update(system_fingerprint="fp_44709d6fcb", usage={"total_tokens": 15, "x": [1]})
    choice = body["choices"][0]
    choice.update(native_finish_reason="tool_calls", error=None, logprobs={"content": None})
    choice["message"].update(reasoning_content="先乘", annotations=[], audio=None, reasoning="r")
    choice["message"]["tool_calls"][0].update(index=0, extra_content={"google": {}})
    reply = lesson.read_reply(as_bytes(body))
    (choice,) = reply.choices
    (call,) = choice.message.tool_calls
    assert (choice.finish_reason, choice.message.reasoning_content) == ("tool_calls", "先乘")
    assert call.extra_content == {"google": {}}  # echoed: the provider wants it back
    carried = {*vars(reply), *vars(choice), *vars(choice.message), *vars(call)}
    not_read = {"system_fingerprint", "usage", "native_finish_reason", "logprobs", "index"}
    not_read |= {"annotations", "audio", "reasoning", "role"}
    assert not carried & not_read, carried & not_read


@pytest.mark.parametrize("content", [None, "absent"])
def test_no_content_beside_tool_calls_passes(content):
    body = copy.deepcopy(TOOL_TURN)
    message = body["choices"][0]["message"]
    if content == "absent":
        del message["content"]
    else:
        message["content"] = content
    reply = lesson.read_reply(as_bytes(body))
    assert reply.choices[0].message.content is None
    assert reply.choices[0].message.tool_calls[0].id == "call_1"


def test_a_utf8_bom_is_accepted():
    reply = lesson.read_reply(b"\xef\xbb\xbf" + FINAL_BYTES)
    assert reply.choices[0].message.content == "248 乘以 15 等于 3720。"


def test_a_bom_elsewhere_is_not_json():
    stop = refused(FINAL_BYTES[:1] + b"\xef\xbb\xbf" + FINAL_BYTES[1:])
    assert "JSON" in stop.reason


def test_brackets_inside_a_string_are_not_nesting():
    body = copy.deepcopy(FINAL)
    body["choices"][0]["message"]["content"] = "[" * 1000 + "{" * 1000
    assert lesson.read_reply(as_bytes(body)).choices[0].message.content.startswith("[[[")


UNREADABLE = {  # (body, the exception the report names, the body's start it quotes or None)
    "not utf-8": (
        json.dumps({"a": "余额"}, ensure_ascii=False).encode("gbk"),
        "UnicodeDecodeError",
        None,
    ),
    "not json": (b"<html><title>Sign in</title></html>", "JSONDecodeError", "<html><title>"),
    "cut off": (FINAL_BYTES[:30], "JSONDecodeError", FINAL_BYTES[:20].decode()),
    "NaN": (b'{"choices": NaN}', "ValueError", '{"choices": NaN}'),
    "a lone surrogate": (b'{"choices": "\\ud800"}', "UnicodeEncodeError", '{"choices": '),
}


@pytest.mark.parametrize(("body", "error", "start"), UNREADABLE.values(), ids=UNREADABLE.keys())
def test_an_unreadable_body_names_what_went_wrong_and_quotes_its_start(body, error, start):
    stop = refused(body, status=203)
    assert stop.reason.startswith("HTTP 203，"), stop.reason
    assert f"（{error}: " in stop.reason, stop.reason
    assert start is None or start in stop.reason, stop.reason


@pytest.mark.parametrize("body", [b"", b" \r\n\t"], ids=["empty", "blank"])
def test_an_empty_body_is_said_to_be_empty(body):
    assert refused(body).reason.endswith("（响应体是空的）")


# --- the shape: every message of the protocol's shape passes; the first bad field is named ---

GOOD_MESSAGES = {
    "text": {"role": "assistant", "content": "3720"},
    "null content": {"role": "assistant", "content": None},
    "no content at all": {"role": "assistant"},
    "no tool_calls": {"content": "3720", "tool_calls": None},
    "empty tool_calls": {"content": "", "tool_calls": []},
    "a call": {"content": None, "tool_calls": [CALL]},
    "a call without id (the loop stops it, naming the id)": {
        "tool_calls": [{"type": "function", "function": {"name": "m", "arguments": "{}"}}]
    },
    "a call with extra fields": {"tool_calls": [{**CALL, "index": 0, "extra_content": {}}]},
    "a refusal": {"content": None, "refusal": "I can't help with that."},
}


@pytest.mark.parametrize("message", GOOD_MESSAGES.values(), ids=GOOD_MESSAGES.keys())
def test_every_message_of_the_protocols_shape_passes_the_gate(message):
    body = with_message(**copy.deepcopy(message))
    assert_read_as(lesson.read_reply(as_bytes(body)), REPLY_READ, body)


BAD_MESSAGES = {  # (message, the field path the report names)
    "message a string": ("hello", "choices[].message "),
    "message a list": ([], "choices[].message "),
    "message null": (None, "choices[].message "),
    "content a list of parts": ({"content": [{"type": "text", "text": "3"}]}, "message.content "),
    "content a number": ({"content": 3720}, "message.content "),
    "content an object": ({"content": {"text": "3720"}}, "message.content "),
    "tool_calls an object": ({"tool_calls": {"0": CALL}}, "message.tool_calls "),
    "tool_calls a string": ({"tool_calls": "multiply"}, "message.tool_calls "),
    "a call a string": ({"tool_calls": ["multiply"]}, "tool_calls[] "),
    "a call without function": ({"tool_calls": [call_with(function=REMOVED)]}, ".function "),
    "function a string": ({"tool_calls": [call_with(function="multiply")]}, ".function "),
    "arguments an object": (
        {"tool_calls": [call_with(function__arguments={"a": 1})]},
        ".function.arguments ",
    ),
    "arguments a number": ({"tool_calls": [call_with(function__arguments=248)]}, ".arguments "),
    "arguments missing": ({"tool_calls": [call_with(function__arguments=REMOVED)]}, ".arguments "),
    "name not a string": ({"tool_calls": [call_with(function__name=["m"])]}, ".function.name "),
    "id a number": ({"tool_calls": [call_with(id=1)]}, "tool_calls[].id "),
    "type missing": ({"tool_calls": [call_with(type=REMOVED)]}, "tool_calls[].type "),
    "the second call": ({"tool_calls": [CALL, call_with(id="c2", type=None)]}, "[].type "),
}


@pytest.mark.parametrize(("message", "path"), BAD_MESSAGES.values(), ids=BAD_MESSAGES.keys())
def test_the_gate_names_the_field_the_loop_could_not_read(message, path):
    body = copy.deepcopy(FINAL)
    body["choices"][0]["message"] = copy.deepcopy(message)
    reason = refused(as_bytes(body)).reason
    assert path in reason.split("：")[0], reason


# --- nesting: anywhere in a 200 body, as deep as the parser goes -----------------------------

COMMAND_LINE_RECURSION_LIMIT = 1000  # CPython's default: what `python3 lesson_03_...py` runs under


def on_a_fresh_stack(function):
    """function() as the command line runs it: on a thread of its own, so its stack starts as
    shallow, under CPython's default recursion limit (pytest's frames, and the limit hypothesis
    raises, would move where deep nesting runs out of stack)."""
    results = []
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(COMMAND_LINE_RECURSION_LIMIT)
    try:
        thread = threading.Thread(target=lambda: results.append(function()))
        thread.start()
        thread.join(60)
    finally:
        sys.setrecursionlimit(limit)
    assert results, "it did not return within 60 s"
    return results[0]


def nested_at(place, depth: int) -> bytes:
    """The bytes of TOOL_TURN with `depth` levels of arrays at `place` (a path into it; () is
    the whole body)."""
    body = copy.deepcopy(TOOL_TURN)
    if not place:
        return as_bytes(MARK).replace(b'"@@"', b"[" * depth + b"]" * depth)
    functools.reduce(lambda node, step: node[step], place[:-1], body)[place[-1]] = MARK
    return as_bytes(body).replace(b'"@@"', b"[" * depth + b"]" * depth)


NEST_PLACES = {  # fields the gate checks (and quotes), fields it keeps and sends back, and not
    "the whole body": (),
    "content": ("choices", 0, "message", "content"),
    "choices[0].error": ("choices", 0, "error"),
    "a call's name": (*CALL_PATH, "function", "name"),
    "reasoning_details (sent back)": ("choices", 0, "message", "reasoning_details"),
    "extra_content (sent back)": (*CALL_PATH, "extra_content"),
    "usage (not carried)": ("usage",),
}


@functools.cache
def deepest_body_read(server) -> int:
    """The deepest whole body main() reads on the command line's stack: one level more, and the
    parser gives up (RecursionError, named in the report)."""

    def read(depth: int) -> bool:
        result = on_a_fresh_stack(
            functools.partial(run_main, server, Reply(body=nested_at((), depth)))
        )
        return "RecursionError" not in result.err_lines[0]

    shallow, deep = 1, 200_000
    assert read(shallow) and not read(deep)
    while deep - shallow > 1:
        middle = (shallow + deep) // 2
        shallow, deep = (middle, deep) if read(middle) else (shallow, middle)
    return shallow


# A known gap, named in the issue note: a field the loop keeps and sends back, nested nearly as
# deep as the parser allows, passes the gate (its json.dumps runs on a shallower stack than the
# SDK's) and fails the next request as a harness bug. No provider sends this; the check that
# closes it did not fit part 3.
SENT_BACK_TOO_DEEP = pytest.mark.xfail(
    strict=True, reason="nested near the parser's limit in a field sent back: the next send fails"
)


@pytest.mark.parametrize(
    "place",
    [
        pytest.param(place, id=name, marks=[SENT_BACK_TOO_DEEP] if "sent back" in name else [])
        for name, place in NEST_PLACES.items()
    ],
)
def test_nesting_anywhere_ends_as_an_answer_or_the_providers_failure_never_a_traceback(
    server, place
):
    # Up to the parser's limit, where reading the body, checking its shape, quoting it, showing
    # the history and sending a kept field back all run nearest the end of the stack
    deepest = deepest_body_read(server) - len(place)  # each step into the body is a level
    for depth in [1, 100, *range(deepest - 16, deepest + 3)]:
        for show in (False, True):
            reply = Reply(body=nested_at(place, depth))
            result = on_a_fresh_stack(functools.partial(run_main, server, reply, show=show))
            said = (depth, show, result.err_lines[:1], result.err_lines[-1:])
            assert "Traceback" not in result.everything and BUG_LINE not in result.err, said
            assert ending(result) in {(0, ""), (3, "Provider")}, said


# --- the gate catches only what the provider sent -------------------------------------------


def broken(*args, **kwargs):
    raise RuntimeError("a harness bug, not the provider")


@pytest.mark.parametrize(
    ("function", "reply"),
    [
        ("execute_tool", Reply(json=TOOL_TURN)),
        ("execute_tool", encoded(gzip.compress(as_bytes(TOOL_TURN)), "gzip")),
        ("final_answer", Reply(json=FINAL)),
        ("assistant_message_from_api", Reply(body=b"\xef\xbb\xbf" + FINAL_BYTES)),
        ("unfinished", Reply(json=completion(content="3720", finish_reason="length"))),
        ("written_orders", Reply(json=FINAL)),
    ],
    ids=[
        "router",
        "router after gzip",
        "final answer",
        "history after a BOM",
        "finish reason",
        "written calls",
    ],
)
def test_a_harness_bug_after_the_gate_still_shows_its_traceback(
    server, monkeypatch, function, reply
):
    monkeypatch.setattr(lesson, function, broken)
    result = run_main(server, reply)
    assert result.code == 1, result.everything
    assert result.err.startswith(BUG_LINE), result.err
    assert "Traceback (most recent call last)" in result.err and "RuntimeError" in result.err
    assert "[Provider]" not in result.err and KEY not in result.everything
