"""A replay is refused when the stream no longer holds its history from sequence 1."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from habitus.projection.replay import IncompleteHistory, replay
from tests.support.tally import TallyProjection


class FakeNats:
    def __init__(self, first_seq: int):
        self.first_seq = first_seq

    def jetstream(self) -> Any:
        outer = self

        class Js:
            async def stream_info(self, name: str) -> Any:
                return SimpleNamespace(state=SimpleNamespace(first_seq=outer.first_seq))

        return Js()


async def test_replay_of_an_expired_history_is_refused_before_anything_is_reset() -> None:
    class NoPool:
        def connection(self) -> Any:
            raise AssertionError("nothing may be reset")

    with pytest.raises(IncompleteHistory, match="starts at sequence 42"):
        await replay(TallyProjection("tally_x", "t1"), FakeNats(42), NoPool())  # type: ignore[arg-type]
