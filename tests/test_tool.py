"""The tool and its router: multiply() types and range, execute_tool() never raises.

execute_tool() is given the calls the gate read_reply() builds from a provider's bytes, so
function.name and function.arguments are always strings here (a call whose arguments are not a
string never reaches the router: tests/test_loop.py, the gate's refusals)."""

import ast
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import lesson_03_tool_calling_loop as lesson
from lesson_03_tool_calling_loop import MAX_ABS_VALUE, execute_tool, multiply


def call(arguments, name="multiply"):
    """One tool call as run_agent gets it: the provider's JSON, read by the real gate."""
    body = lesson.fake_response(
        "tool_calls", tool_calls=[lesson.fake_call("call_1", arguments, name)]
    )
    (tool_call,) = lesson.read_reply(json.dumps(body).encode()).choices[0].message.tool_calls
    return tool_call


def run(arguments, name="multiply"):
    return json.loads(execute_tool(call(arguments, name)))


@pytest.mark.parametrize(
    ("a", "b", "product"),
    [
        (248, 15, 3720),
        (-7, 6, -42),
        (0, MAX_ABS_VALUE, 0),
        (MAX_ABS_VALUE, -MAX_ABS_VALUE, -(10**12)),
    ],
)
def test_multiply_accepts_in_range_ints(a, b, product):
    assert multiply(a, b) == product


@pytest.mark.parametrize(
    "bad",
    [
        True,
        False,
        248.0,
        1.5,
        "248",
        None,
        [248],
        {"v": 248},
        MAX_ABS_VALUE + 1,
        -MAX_ABS_VALUE - 1,
    ],
    ids=repr,
)
@pytest.mark.parametrize("position", ["a", "b"])
def test_multiply_rejects_anything_but_in_range_int(bad, position):
    args = {"a": 248, "b": 15, position: bad}
    with pytest.raises(ValueError, match=position):
        multiply(**args)


def test_multiply_rejects_bool_even_though_bool_is_int():
    with pytest.raises(ValueError, match="True"):  # the model is shown the value it sent
        multiply(True, 15)


def test_success_is_the_articles_compact_json():
    assert execute_tool(call('{"a":248,"b":15}')) == '{"status":"completed","result":3720}'
    assert execute_tool(call('{ "b" : 15 , "a" : 248 }')) == '{"status":"completed","result":3720}'


@pytest.mark.parametrize(
    ("arguments", "message_part"),
    [
        # the value the model sent, quoted back as Python writes it (repr)
        ('{"a":"248","b":15}', "'248'"),
        ('{"a":true,"b":15}', "True"),
        ('{"a":248.0,"b":15}', "248.0"),
        ('{"a":null,"b":15}', "None"),
        ('{"a":1e400,"b":15}', "inf"),
        ('{"a":NaN,"b":15}', "nan"),
        ('{"a":248,"b":15,"c":1}', "['a', 'b', 'c']"),
        ('{"a":248}', "['a']"),
        ("{}", "[]"),
        ('{"a":1,"a":248,"b":15}', "['a', 'a', 'b']"),
        ('{"a":248,"b":15,"b":15}', "['a', 'b', 'b']"),
        ('{"a":248,', "不是合法 JSON"),
        ("multiply(248, 15)", "不是合法 JSON"),
        ("[248, 15]", "JSON 对象"),
        ('"{\\"a\\":248,\\"b\\":15}"', "JSON 对象"),
        ("248", "JSON 对象"),
        ("", "为空"),
        ("   ", "为空"),
        ('{"a":' + "9" * 150 + ',"b":15}', "绝对值"),
        ('{"a":' + "9" * 5000 + ',"b":15}', "超过 200 个字符"),
        ("[" * 100_000, "超过 200 个字符"),
        ('{"a":2000000,"b":1}', "绝对值"),
    ],
)
def test_bad_arguments_become_controlled_errors(arguments, message_part):
    result = run(arguments)
    assert result["status"] == "error"
    assert message_part in result["message"]
    assert set(result) == {"status", "message"}


@pytest.mark.parametrize(
    "name", ["delete_files", "", "Multiply", "multiply ", "functions.multiply"]
)
def test_unknown_tool_names_are_refused(name):
    result = run('{"a":248,"b":15}', name)
    assert result["status"] == "error"
    assert "未知工具" in result["message"]


# As deep as arguments under the length cap can go: every character opens a level. Far below
# the depth at which any CPython's parser raises RecursionError, so it is a plain JSON error.
CAP = lesson.MAX_ARGUMENTS_CHARS
DEEPEST = ["[" * CAP, '{"a":' + "[" * (CAP - 5), '{"a":' + "[" * (CAP - 10) + "]" * 5]


@pytest.mark.parametrize("arguments", DEEPEST, ids=["array", "in-object", "closed-late"])
def test_nesting_as_deep_as_the_length_cap_allows_is_a_controlled_error(arguments):
    assert len(arguments) == CAP
    result = run(arguments)  # a RecursionError escaping here fails the test
    assert (result["status"], set(result)) == ("error", {"status", "message"}), result
    assert "不是合法 JSON" in result["message"]  # parsed, not refused for its length


def test_arguments_over_200_characters_are_refused_for_their_length():
    valid = '{"a":248,"b":15}'
    assert run(valid + " " * (200 - len(valid)))["status"] == "completed"  # 200: still read
    result = run(valid + " " * (201 - len(valid)))
    assert result["status"] == "error" and "200" in result["message"], result


def test_error_messages_stay_one_bounded_line():
    # Bounded data for the model; escaping for a terminal happens where text is shown (redact)
    name = "x\n\x1b[31m" + "y" * 5000
    message = run('{"a":248,"b":15}', name)["message"]
    assert "\n" not in message and len(message) < 200


def test_the_script_never_calls_eval_exec_or_compile():
    tree = ast.parse(Path(lesson.__file__).read_text(encoding="utf-8"))
    called = {
        node.func.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    }
    assert "print" in called  # the walk really sees calls
    assert called.isdisjoint({"eval", "exec", "compile", "__import__"})


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=8,
)
# What a model may write, as the gate hands it on: strings (a lone surrogate would not pass the
# gate, which refuses a reply it could not send back)
model_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=60)
any_arguments = st.one_of(
    model_text,
    json_values.map(json.dumps),
    st.dictionaries(st.sampled_from(["a", "b", "c", ""]), json_values, max_size=4).map(json.dumps),
)


def strict_object(pairs):
    """Oracle: an object with a repeated key has no single meaning."""
    if len({key for key, _ in pairs}) != len(pairs):
        raise ValueError("duplicate key")
    return dict(pairs)


@given(name=st.one_of(st.just("multiply"), model_text), arguments=any_arguments)
def test_router_never_raises_and_completes_only_for_two_real_ints(name, arguments):
    result = json.loads(execute_tool(call(arguments, name)))
    try:  # all short: the length cap is tested on its own above
        parsed = json.loads(arguments, object_pairs_hook=strict_object)
    except ValueError:
        parsed = None
    valid = (
        name == "multiply"
        and isinstance(parsed, dict)
        and set(parsed) == {"a", "b"}
        and all(type(parsed[k]) is int and abs(parsed[k]) <= MAX_ABS_VALUE for k in "ab")
    )
    if valid:
        assert result == {"status": "completed", "result": parsed["a"] * parsed["b"]}
    else:
        assert result["status"] == "error" and isinstance(result["message"], str)


@given(a=st.integers(-MAX_ABS_VALUE, MAX_ABS_VALUE), b=st.integers(-MAX_ABS_VALUE, MAX_ABS_VALUE))
def test_router_completes_every_in_range_pair(a, b):
    assert run(json.dumps({"a": a, "b": b})) == {"status": "completed", "result": a * b}
