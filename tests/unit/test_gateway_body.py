"""Gateway body checks: depth measured before parsing, unstorable text found and named."""

from __future__ import annotations

import json
from typing import Any

import pytest

from services.gateway.body import (
    DuplicateKey,
    TooDeep,
    depth_exceeds,
    locate_depth,
    parse_json,
    unstorable,
)


def nested(depth: int) -> Any:
    value: Any = 1
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


def true_depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((true_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((true_depth(v) for v in value), default=0)
    return 0


@pytest.mark.parametrize("depth", [1, 2, 5, 31, 32, 33, 64])
def test_depth_is_measured_exactly(depth: int) -> None:
    raw = json.dumps(nested(depth)).encode()
    assert true_depth(json.loads(raw)) == depth
    assert depth_exceeds(raw, 32) is (depth > 32)


def test_brackets_inside_strings_do_not_count() -> None:
    raw = json.dumps([{"text": "[[[[{{{{ \\\" ]]]] \" [[[["}]).encode()
    assert not depth_exceeds(raw, 2)
    assert depth_exceeds(json.dumps([[[{"a": "]]]"}]]]).encode(), 3)


def test_far_too_deep_is_refused_without_recursion() -> None:
    raw = b"[" * 200_000 + b"]" * 200_000
    with pytest.raises(TooDeep) as caught:
        parse_json(raw, 64)
    assert caught.value.limit == 64
    assert len(caught.value.path) == 64


def test_the_path_to_the_too_deep_container_is_named() -> None:
    body = [{"type": "x"}, {"type": "TraceCompleted",
                           "payload": {"steps": [{"output": nested(40)}]}}]
    raw = json.dumps(body).encode()
    assert depth_exceeds(raw, 10)
    path = locate_depth(raw, 10)
    assert path[:7] == ("1", "payload", "steps", "0", "output", "0", "k")
    assert len(path) == 10


def test_invalid_json_is_left_to_the_parser() -> None:
    assert not depth_exceeds(b"[}", 5)
    with pytest.raises(ValueError):
        parse_json(b"[}", 5)


def test_unstorable_lists_every_bad_string_and_key() -> None:
    found = dict(unstorable({"a": ["ok", "x\x00"], "b\ud800": 1, "c": {"d": "\udfff"}}))
    assert set(found) == {"a.1", "b\\ud800", "c.d"}
    assert "NUL" in found["a.1"]
    assert "key" in found["b\\ud800"]
    assert "surrogate" in found["c.d"]
    assert list(unstorable({"a": ["fine", "\U0001f600"], "n": 1.5, "z": None})) == []


# ------------------------------------------------------------------------- duplicate keys

@pytest.mark.parametrize(("body", "path"), [
    (b'{"user_id": "a", "user_id": "b"}', ("user_id",)),
    (b'[{"a": 1}, {"type": "T", "payload": {"x": 1, "y": 2, "x": 3}}]',
     ("1", "payload", "x")),
    # the same key in two objects, or in a string, is no duplicate; the repeated one is found
    (b'[{"k": "\\"k\\": 1, \\"k\\":"}, {"k": 1}, {"k": {"k": 1}, "k": 2}]', ("2", "k")),
    (b'{"a": [{"b": 1}, {"b": 2, "c": [1, {"d": 1, "d": 1}]}]}', ("a", "1", "c", "1", "d")),
])
def test_a_key_given_twice_is_refused_with_its_path(body: bytes, path: tuple[str, ...]
                                                     ) -> None:
    with pytest.raises(DuplicateKey) as refused:
        parse_json(body, 64)
    assert refused.value.path == path


def test_keys_once_per_object_parse_as_before() -> None:
    body = b'[{"k": 1, "payload": {"k": 2, "n": [{"k": 3}]}}, {"k": 4}]'
    assert parse_json(body, 64) == json.loads(body)
