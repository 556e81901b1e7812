"""The trace store's batch sealer for jsonb step values: what it writes reads back the same."""

from __future__ import annotations

import json

import pytest

from habitus.crypto.columns import COLUMNS
from services.trace_router.store import Sealer


@pytest.mark.parametrize("raw", ['"hc0:abc"', '"hc1:abc"', '"plain"', '{"a": 1}', "[1, 2]"])
def test_an_unsealed_step_value_reads_back_as_written_even_when_it_looks_sealed(raw: str
                                                                                 ) -> None:
    """The tenant's own values are never sealed; a JSON string that began with the sealed or
    escaped prefix used to read back cut ("hc0:abc" as "abc") or fail to open ("hc1:...")."""
    stored = Sealer().json("acme", "_tenant", raw)
    assert stored is not None
    assert COLUMNS.open_json("acme", "_tenant", json.loads(stored)) == json.loads(raw)
