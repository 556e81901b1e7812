"""The JSON parser psycopg uses (pydantic-core's, installed by `habitus.db`) reads every
document the standard library reads as the same value."""

from __future__ import annotations

import json
from typing import Any

import pydantic_core
from hypothesis import example, given
from hypothesis import strategies as st
from psycopg.types.json import JsonbBinaryLoader, JsonbLoader

import habitus.db  # noqa: F401  (installs the parser)

VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=20)


@given(VALUES)
@example({"n": 2 ** 70, "tiny": 5e-324, "big": 1.7976931348623157e308, "neg": -0.0})
@example({"text": "Grüße, 東京 \u2028 \U0001f600 \"quoted\" \\ back"})
@example([1790000000.123456, 0.1 + 0.2, 12, {"type": "turn", "turn_id": "t12"}])
def test_pydantic_core_reads_what_json_reads(value: Any) -> None:
    for text in (json.dumps(value), json.dumps(value, ensure_ascii=False)):
        got = pydantic_core.from_json(text.encode())
        assert got == json.loads(text)
        assert json.dumps(got) == json.dumps(json.loads(text))  # -0.0 and int/float kept apart


def test_psycopgs_jsonb_loaders_use_it() -> None:
    for loader in (JsonbLoader, JsonbBinaryLoader):
        assert loader(3802).loads is pydantic_core.from_json
