"""Banner 字节变成回复: an HTTP 200's bytes become a reply in one gate, read_reply().

Whatever the provider sent that the loop cannot read - more than MAX_REPLY_BYTES (a
decompression bomb included), nested deeper than MAX_DEPTH, not UTF-8, empty, not strict JSON,
compressed wrongly, cut off, or not the shape the loop reads - is the provider's failure: exit 3,
link [Provider]. Every body without a choice to read (`{}`, `{"choices": []}`, an error in
choices[0] ...) ends that one way. What the gate lets through is the loop's to judge (an answer,
exit 0, or a stop, exit 1). And the gate catches only what the provider sent: a harness bug
elsewhere still shows its traceback.

Over real HTTP through the real SDK where its HTTP library is the point (decompression,
framing); read_reply fed chunks directly where it is not.
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
import struct
import tracemalloc
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
MIB = 1 << 20


def as_bytes(value) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode()


# --- bodies the SDK's HTTP library has to decompress ---------------------------------------


@functools.cache
def gzip_bomb(mebibytes: int = 700) -> bytes:
    """A valid gzip stream of `mebibytes` MiB of zeros, in about 1 KB a MiB, made without
    compressing it all: after a full flush the deflate stream of one more zero MiB is always the
    same bytes, so it is compressed twice and repeated; the trailer's CRC is summed alongside."""
    block = bytes(MIB)
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    head = compressor.compress(block) + compressor.flush(zlib.Z_FULL_FLUSH)
    unit = compressor.compress(block) + compressor.flush(zlib.Z_FULL_FLUSH)
    crc = 0
    for _ in range(mebibytes):
        crc = zlib.crc32(block, crc)
    final_block = compressor.flush()[:-8]  # the last block, less the trailer for 2 MiB
    trailer = struct.pack("<II", crc, (mebibytes * MIB) & 0xFFFFFFFF)
    return head + unit * (mebibytes - 1) + final_block + trailer


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


class GzipBomb(Reply):
    """A 200 of 700 MiB of zeros, gzip-compressed and labelled so: made when first sent."""

    def __init__(self) -> None:
        super().__init__(headers={"Content-Encoding": "gzip"})

    def encode(self) -> tuple:
        return gzip_bomb(), "application/json"


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


def assert_an_answer_a_stop_or_the_providers_failure(result: Run) -> None:
    assert BUG_LINE not in result.everything, result.everything
    assert "Traceback" not in result.everything, result.everything
    assert KEY not in result.everything and "\x1b" not in result.everything, result.everything
    outcome = ending(result)
    assert outcome in {(0, ""), (1, "Harness"), (1, "Provider"), (1, "Model"), (3, "Provider")}, (
        result.everything
    )
    if outcome == (0, ""):
        assert result.err == "" and "Agent> " in result.out, result.everything


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
        depth = st.integers(lesson.MAX_DEPTH - 6, lesson.MAX_DEPTH + 2) | st.just(50_000)
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
    "gzip bomb",
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
    if how == "gzip bomb":
        return GzipBomb()
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
@example(reply=GzipBomb(), show=False)
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


@pytest.mark.parametrize(
    "body",
    [
        {"choices": [], "error": {"message": "WORDS"}},
        {"choices": [{"index": 0, "error": {"message": "WORDS", "code": 502}}]},
        {"id": "", "choices": None, "base_resp": {"status_code": 1002, "status_msg": "WORDS"}},
        {"error_code": 110, "error_msg": "WORDS"},
    ],
    ids=["error beside choices", "error in choices[0]", "base_resp", "error_msg"],
)
def test_a_body_without_a_choice_quotes_the_providers_words(server, body):
    words = "quota for this model used up"
    result = run_main(server, Reply(json=json.loads(json.dumps(body).replace("WORDS", words))))
    assert ending(result) == (3, "Provider"), result.everything
    assert words in result.err_lines[0], result.err


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


# Each shape the issue names, as a provider would send it: the loop could read none of them
NAMED_SHAPES = {
    "choices missing": {"id": "chatcmpl-1", "object": "chat.completion"},
    "choices []": {"choices": []},
    "choices an object": {"choices": {"0": FINAL["choices"][0]}},
    "choices a number": {"choices": 1},
    "message not an object": {"choices": [{"index": 0, "message": "3720"}]},
    "content a list": with_message(content=[{"type": "text", "text": "3720"}]),
    "content a number": with_message(content=3720),
    "tool_calls an object": with_message(content=None, tool_calls={"0": CALL}),
    "tool_calls a number": with_message(content=None, tool_calls=3720),
    "a call without function": with_call(function=REMOVED),
    "arguments not a string": with_call(function__arguments={"a": 248, "b": 15}),
    "type not function": with_call(type="custom"),
    "choices[0].error": {"choices": [{**FINAL["choices"][0], "error": {"message": "cut"}}]},
}


@pytest.mark.parametrize("body", NAMED_SHAPES.values(), ids=NAMED_SHAPES.keys())
def test_every_named_malformed_shape_is_the_providers_failure_and_runs_nothing(server, body):
    requests_before = len(server.requests)
    result = run_main(server, Reply(json=body))
    assert ending(result) == (3, "Provider"), result.everything
    assert result.err_lines[0].startswith("[Provider] step 1: HTTP 200"), result.err
    assert "call_id=" not in result.out and "Agent>" not in result.out
    assert len(server.requests) == requests_before + 1  # nothing more was sent


# --- compressed bodies, one by one -----------------------------------------------------------

COMPRESSED = {
    "gzip": (encoded(gzip.compress(FINAL_BYTES), "gzip"), (0, "")),
    "deflate": (encoded(zlib.compress(FINAL_BYTES), "deflate"), (0, "")),
    "says gzip, is plain JSON": (encoded(FINAL_BYTES, "gzip"), (3, "Provider")),
    "says deflate, is garbage": (encoded(b"\x00\xff not deflate", "deflate"), (3, "Provider")),
    "says gzip twice, is once": (
        encoded(gzip.compress(FINAL_BYTES), "gzip, gzip"),
        (3, "Provider"),
    ),
    "gzip, unsaid": (Reply(body=gzip.compress(FINAL_BYTES)), (3, "Provider")),
    "says br, is not brotli": (encoded(b"\x8b\x00 not brotli", "br"), (3, "Provider")),
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
    else:  # the bytes as they came, or as far as they were decompressed, are quoted
        assert result.err_lines[0].startswith("[Provider] step 1: HTTP 200"), result.err


def test_a_gzip_bomb_is_stopped_at_the_size_limit_in_bounded_memory(server):
    gzip_bomb()  # 700 MiB of zeros in under 1 MB, made before memory is counted
    tracemalloc.start()
    try:
        result = run_main(server, GzipBomb())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert ending(result) == (3, "Provider"), result.everything
    assert f"{lesson.MAX_REPLY_BYTES >> 20} MB" in result.err_lines[0], result.err
    # Stopped soon past the limit: openai 3's HTTP library decompresses in small pieces (about
    # 22 MiB at the peak here), httpx for openai 1 and 2 in up to 64 MiB at once, which the
    # gate's buffer and its copy make about 200 MiB. Reading the whole bomb takes over 1.4 GiB.
    assert peak < 400 * MIB, peak >> 20


def test_the_test_bodies_are_the_compressed_streams_they_claim_to_be():
    # the two hand-made streams, checked where a decoder is at hand
    assert zlib.decompress(gzip_bomb(3), 16 + zlib.MAX_WBITS) == bytes(3 * MIB)
    stream = zlib.decompressobj(16 + zlib.MAX_WBITS)
    assert stream.decompress(gzip_bomb(), 1 << 16) == bytes(1 << 16)
    if BROTLI_DECODER:
        brotli = importlib.import_module(
            "brotli" if importlib.util.find_spec("brotli") else "brotlicffi"
        )
        for data in (b"", FINAL_BYTES, bytes(range(256)) * 600):
            assert brotli.decompress(brotli_stored(data)) == data
    assert brotli_stored(b"") == b"\x06"  # WBITS 0, ISLAST 1, ISLASTEMPTY 1


# --- read_reply fed chunks directly: where the lines are ------------------------------------


def refused(chunks) -> lesson.RequestFailed:
    with pytest.raises(lesson.RequestFailed) as caught:
        lesson.read_reply(chunks)
    stop = caught.value
    assert (stop.link, stop.exit_code) == ("Provider", 3), stop.reason
    return stop


def test_a_valid_reply_with_extra_provider_fields_passes_and_keeps_them():
    body = copy.deepcopy(TOOL_TURN)
    body.update(system_fingerprint="fp_44709d6fcb", usage={"total_tokens": 15, "x": [1]})
    choice = body["choices"][0]
    choice.update(native_finish_reason="tool_calls", error=None, logprobs={"content": None})
    choice["message"].update(reasoning_content="先乘", annotations=[], audio=None, refusal=None)
    choice["message"]["tool_calls"][0].update(index=0, extra_content={"google": {}})
    reply = lesson.read_reply([as_bytes(body)])
    (call,) = reply.choices[0].message.tool_calls
    assert (call.id, call.type, call.function.name) == ("call_1", "function", "multiply")
    assert call.function.arguments == '{"a":248,"b":15}' and call.index == 0
    assert reply.choices[0].finish_reason == "tool_calls"
    assert reply.choices[0].native_finish_reason == "tool_calls"
    assert reply.choices[0].message.reasoning_content == "先乘"
    assert reply.system_fingerprint == "fp_44709d6fcb" and reply.usage["x"] == [1]


@pytest.mark.parametrize("content", [None, "absent"])
def test_no_content_beside_tool_calls_passes(content):
    body = copy.deepcopy(TOOL_TURN)
    message = body["choices"][0]["message"]
    if content == "absent":
        del message["content"]
    else:
        message["content"] = content
    reply = lesson.read_reply([as_bytes(body)])
    assert reply.choices[0].message.content is None
    assert reply.choices[0].message.tool_calls[0].id == "call_1"


@pytest.mark.parametrize(
    "chunks",
    [
        [b"\xef\xbb\xbf" + FINAL_BYTES],
        [b"\xef", b"\xbb", b"\xbf" + FINAL_BYTES[:5], FINAL_BYTES[5:]],
    ],
    ids=["whole", "split in the BOM"],
)
def test_a_utf8_bom_is_accepted(chunks):
    reply = lesson.read_reply(chunks)
    assert reply.choices[0].message.content == "248 乘以 15 等于 3720。"


def test_a_bom_elsewhere_is_not_json():
    stop = refused([FINAL_BYTES[:1] + b"\xef\xbb\xbf" + FINAL_BYTES[1:]])
    assert "JSON" in stop.reason


def levels(value) -> int:
    """Levels of nesting: arrays and objects around the innermost value (a scalar here)."""
    children = value.values() if isinstance(value, dict) else value
    if not isinstance(value, (dict, list)):
        return 0
    return 1 + max(map(levels, children), default=0)


def body_nested(total: int, container: str) -> dict:
    """FINAL with a kept field nested so that the whole body has `total` levels."""
    body = copy.deepcopy(FINAL)
    value = 0
    for _ in range(total - 4):  # the body, choices, choices[0] and the message are four
        value = [value] if container == "arrays" else {"k": value}
    body["choices"][0]["message"]["reasoning_details"] = value
    assert levels(body) == total
    return body


@pytest.mark.parametrize("container", ["arrays", "objects"])
@pytest.mark.parametrize("total", [lesson.MAX_DEPTH - 1, lesson.MAX_DEPTH])
def test_nesting_up_to_max_depth_passes(container, total):
    reply = lesson.read_reply([as_bytes(body_nested(total, container))])
    assert reply.choices[0].message.content == "248 乘以 15 等于 3720。"


@pytest.mark.parametrize("container", ["arrays", "objects"])
def test_nesting_one_level_past_max_depth_fails(container):
    body = as_bytes(body_nested(lesson.MAX_DEPTH + 1, container))
    stop = refused([body])
    assert body[:20].decode() in stop.reason  # the body's start is quoted


def test_brackets_inside_a_string_are_not_nesting():
    body = copy.deepcopy(FINAL)
    body["choices"][0]["message"]["content"] = "[" * 1000 + "{" * 1000
    assert lesson.read_reply([as_bytes(body)]).choices[0].message.content.startswith("[[[")


def body_of_size(size: int) -> bytes:
    body = copy.deepcopy(FINAL)
    body["choices"][0]["message"]["content"] = ""
    padding = size - len(as_bytes(body))
    body["choices"][0]["message"]["content"] = "x" * padding
    data = as_bytes(body)
    assert len(data) == size
    return data


def in_pieces(data: bytes, size: int = 64 * 1024) -> list:
    return [data[start : start + size] for start in range(0, len(data), size)]


@pytest.mark.parametrize("pieces", [False, True], ids=["one chunk", "64 KiB chunks"])
def test_a_body_of_exactly_max_reply_bytes_passes_and_one_byte_more_fails(pieces):
    exact = body_of_size(lesson.MAX_REPLY_BYTES)
    split = in_pieces if pieces else lambda data: [data]
    reply = lesson.read_reply(split(exact))
    assert len(reply.choices[0].message.content) > lesson.MAX_REPLY_BYTES - 1000
    stop = refused(split(exact + b" "))  # still valid JSON: only its size is wrong
    assert f"{lesson.MAX_REPLY_BYTES >> 20} MB" in stop.reason


def test_the_gate_stops_reading_an_endless_body_just_past_the_limit():
    taken = []

    def endless():
        for _ in range(64):  # a bound for the test, not for the gate
            taken.append(MIB)
            yield b" " * MIB

    refused(endless())
    assert sum(taken) == lesson.MAX_REPLY_BYTES + MIB  # the first MiB past the limit ends it


def raising_after(*chunks, error):
    yield from chunks
    raise error


WHAT_BODY = {  # (chunks, a word the report's description must carry, or None)
    "too big": ([b" " * (lesson.MAX_REPLY_BYTES + 1)], f"{lesson.MAX_REPLY_BYTES >> 20} MB"),
    "not utf-8": ([json.dumps({"a": "余额"}, ensure_ascii=False).encode("gbk")], "UTF-8"),
    "empty": ([], None),
    "not json": ([b"<html><title>Sign in</title></html>"], "JSON"),
    "not strict json": ([b'{"choices": NaN}'], "JSON"),
    "cut short in reading": (raising_after(b'{"choi', error=OSError("reset")), None),
}


def test_what_body_is_names_each_kind_of_unreadable_body_differently():
    reasons = {name: refused(chunks).reason for name, (chunks, _) in WHAT_BODY.items()}
    for name, (_, word) in WHAT_BODY.items():
        assert word is None or word in reasons[name], (name, reasons[name])
    assert (
        "OSError" in reasons["cut short in reading"] and '{"choi' in reasons["cut short in reading"]
    )
    assert "<html><title>Sign in" in reasons["not json"]  # the body's start, quoted
    # with what the body was, not the body itself, telling the kinds apart
    described = {reason.split("（")[0].split("：")[0] for reason in reasons.values()}
    assert len(described) == len(WHAT_BODY), reasons


def test_whitespace_only_is_empty_too():
    assert refused([b" \r\n\t"]).reason == refused([b""]).reason


# --- reply_problem: the fields the loop reads, each checked once -----------------------------

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
}


@pytest.mark.parametrize("message", GOOD_MESSAGES.values(), ids=GOOD_MESSAGES.keys())
def test_reply_problem_lets_every_message_of_the_protocols_shape_through(message):
    assert lesson.reply_problem(copy.deepcopy(message)) == ""


BAD_MESSAGES = {  # (message, what the problem must name)
    "message a string": ("hello", "message"),
    "message a list": ([], "message"),
    "message null": (None, "message"),
    "content a list of parts": ({"content": [{"type": "text", "text": "3720"}]}, "content"),
    "content a number": ({"content": 3720}, "content"),
    "content an object": ({"content": {"text": "3720"}}, "content"),
    "tool_calls an object": ({"tool_calls": {"0": CALL}}, "tool_calls"),
    "tool_calls a string": ({"tool_calls": "multiply"}, "tool_calls"),
    "a call a string": ({"tool_calls": ["multiply"]}, "第 1 个"),
    "a call without function": ({"tool_calls": [call_with(function=REMOVED)]}, "第 1 个"),
    "function a string": ({"tool_calls": [call_with(function="multiply")]}, "第 1 个"),
    "arguments an object": ({"tool_calls": [call_with(function__arguments={"a": 1})]}, "第 1 个"),
    "arguments a number": ({"tool_calls": [call_with(function__arguments=248)]}, "第 1 个"),
    "arguments missing": ({"tool_calls": [call_with(function__arguments=REMOVED)]}, "第 1 个"),
    "name not a string": ({"tool_calls": [call_with(function__name=["multiply"])]}, "第 1 个"),
    "id a number": ({"tool_calls": [call_with(id=1)]}, "第 1 个"),
    "type custom": ({"tool_calls": [call_with(type="custom")]}, "第 1 个"),
    "type missing": ({"tool_calls": [call_with(type=REMOVED)]}, "第 1 个"),
    "the second call": ({"tool_calls": [CALL, call_with(id="c2", type=None)]}, "第 2 个"),
}


@pytest.mark.parametrize(("message", "named"), BAD_MESSAGES.values(), ids=BAD_MESSAGES.keys())
def test_reply_problem_names_the_first_field_the_loop_could_not_read(message, named):
    problem = lesson.reply_problem(copy.deepcopy(message))
    assert named in problem, problem
    body = copy.deepcopy(FINAL)
    body["choices"][0]["message"] = message
    assert problem in refused([as_bytes(body)]).reason  # the gate says the same


# --- nested_deeper: counts levels without recursing past them --------------------------------

NON_EMPTY_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=3),
    lambda inner: (
        st.lists(inner, min_size=1, max_size=3)
        | st.dictionaries(st.text(max_size=3), inner, min_size=1, max_size=3)
    ),
    max_leaves=20,
)


@given(value=NON_EMPTY_JSON, limit=st.integers(0, 8))
def test_nested_deeper_is_true_exactly_when_the_levels_exceed_the_limit(value, limit):
    assert lesson.nested_deeper(value, limit) == (levels(value) > limit)


def test_nested_deeper_looks_no_deeper_than_its_limit():
    value = 0
    for _ in range(200_000):  # far past any recursion limit
        value = [value]
    assert lesson.nested_deeper(value, lesson.MAX_DEPTH) is True


# --- the gate catches only what the provider sent ------------------------------------------


def broken(*args, **kwargs):
    raise RuntimeError("a harness bug, not the provider")


@pytest.mark.parametrize(
    ("function", "reply"),
    [
        ("execute_tool", Reply(json=TOOL_TURN)),
        ("execute_tool", encoded(gzip.compress(as_bytes(TOOL_TURN)), "gzip")),
        ("final_answer", Reply(json=FINAL)),
        ("assistant_message_from_api", Reply(body=b"\xef\xbb\xbf" + FINAL_BYTES)),
        ("finish_reason_stop", Reply(json=completion(content="3720", finish_reason="length"))),
    ],
    ids=["router", "router after gzip", "final answer", "history after a BOM", "finish reason"],
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


# --- the same gate for an error status: what the SDK reads itself ---------------------------


@pytest.mark.parametrize("status", [400, 500])
def test_an_error_body_that_lies_about_its_gzip_is_the_providers_failure(server, status):
    # Rule: anything raised while reading what the provider sent is the provider's failure.
    # For a non-2xx the SDK reads the body itself, before any of the script's code runs.
    reply = encoded(b'{"error": {"message": "bad"}}', "gzip")
    reply.status = status
    result = run_main(server, reply)
    assert ending(result) == (3, "Provider"), result.everything
    assert BUG_LINE not in result.err and "Traceback" not in result.err
