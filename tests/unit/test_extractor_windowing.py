"""Where windows close (pure), what a stored answer publishes, and how long a failed window
waits."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from habitus.events.evidence import DocumentChunkRef, TurnRef
from services.extractor.consequences import (
    bad_json_result,
    chunks_of,
    stored_result,
    window_events,
)
from services.extractor.material import ChunkDraft
from services.extractor.store import WindowRow
from services.extractor.validation import validate_extraction
from services.extractor.windowing import (
    Kept,
    Limits,
    OpenWindow,
    Piece,
    add_material,
    reflection,
    tick,
)
from services.extractor.worker import retry_delay, source_key

LIMITS = Limits(window_tokens=100, window_seconds=60.0, max_chunks=5)


def piece(text: str, seq: int, *, kind: str = "user_turn") -> Piece:
    evidence: Any = (TurnRef(session_id="s1", turn_id=f"t{seq}") if kind.endswith("turn")
                     else DocumentChunkRef(source_id="plan", chunk_id=f"c{seq}"))
    return Piece(ChunkDraft(kind, evidence, text, 1_790_000_000.0 + seq),  # type: ignore[arg-type]
                 f"e{seq}", seq)


def chars(tokens: int) -> str:
    return "x" * (tokens * 4)


def test_a_window_read_back_unopened_folds_and_closes_as_the_same_window_opened() -> None:
    """What a window kept from its row (unopened: `Kept`) counts as its pieces did, so it
    closes where the opened window would; a closed one has no id until the store opens it."""
    held = [piece(chars(30), 1), piece(chars(30), 2)]
    as_opened = OpenWindow(1, 0.0, tuple(held))
    as_kept = OpenWindow(1, 0.0, (), Kept(tuple(p.as_dict() for p in held), as_opened.tokens))
    assert (as_kept.tokens, as_kept.size) == (60, 2)
    for more in ([piece(chars(30), 3)], [piece(chars(30), 3), piece(chars(30), 4)],
                 [piece(chars(5), n) for n in range(3, 7)]):
        opened = add_material("docs", as_opened, more, seq=9, stored_at=1, limits=LIMITS)
        kept = add_material("docs", as_kept, more, seq=9, stored_at=1, limits=LIMITS)
        assert [(w.closed_by, w.tokens) for w in kept.closed] == [
            (w.closed_by, w.tokens) for w in opened.closed]
        assert (kept.open is None) == (opened.open is None)
        if kept.open is not None and opened.open is not None:
            assert (kept.open.tokens, kept.open.size) == (opened.open.tokens,
                                                          len(opened.open.pieces))
    [closed] = tick("docs", as_kept, 1, seq=9, stored_at=2).closed
    [same] = tick("docs", as_opened, 1, seq=9, stored_at=2).closed
    assert closed.kept is as_kept.kept and closed.tokens == same.tokens == 60
    texts = [p.draft.text for p in held]
    assert closed.chunk_keys() == same.chunk_keys()
    assert closed.window_id(texts) == same.window_id(texts)


def test_material_joins_the_open_window_until_the_tokens_fill_it() -> None:
    fold = add_material("conversations", None, [piece(chars(40), 1)], seq=1, stored_at=0,
                        limits=LIMITS)
    assert fold.closed == [] and fold.open is not None and fold.open.opened_seq == 1
    fold = add_material("conversations", fold.open, [piece(chars(40), 2)], seq=2,
                        stored_at=1, limits=LIMITS)
    assert fold.closed == [] and fold.open is not None and fold.open.tokens == 80
    # the third would overflow: the window closes first, the new material opens the next
    fold = add_material("conversations", fold.open, [piece(chars(40), 3)], seq=3,
                        stored_at=2, limits=LIMITS)
    [closed] = fold.closed
    assert (closed.closed_by, closed.opened_seq, closed.closed_seq, closed.tokens) == (
        "tokens", 1, 3, 80)
    assert fold.open is not None and fold.open.opened_seq == 3


def test_material_that_fills_a_window_closes_it_at_once() -> None:
    fold = add_material("email", None, [piece(chars(100), 7)], seq=7, stored_at=0,
                        limits=LIMITS)
    [closed] = fold.closed
    assert closed.closed_by == "tokens" and fold.open is None
    # larger than a window on its own: a window of its own, never split
    fold = add_material("email", None, [piece(chars(500), 8)], seq=8, stored_at=0,
                        limits=LIMITS)
    assert [w.tokens for w in fold.closed] == [500] and fold.open is None


def test_a_window_open_too_long_closes_before_new_material_joins() -> None:
    first = add_material("conversations", None, [piece("hello", 1)], seq=1, stored_at=100,
                         limits=LIMITS)
    later = add_material("conversations", first.open, [piece("again", 2)], seq=2,
                         stored_at=160, limits=LIMITS)
    [closed] = later.closed
    assert closed.closed_by == "time" and [p.seq for p in closed.pieces] == [1]
    assert later.open is not None and later.open.opened_at == 160


def test_too_many_pieces_close_a_window() -> None:
    window: OpenWindow | None = None
    closed = []
    for seq in range(1, 8):
        fold = add_material("conversations", window, [piece("hi", seq)], seq=seq,
                            stored_at=seq, limits=LIMITS)
        window = fold.open
        closed.extend(fold.closed)
    assert [len(w.pieces) for w in closed] == [5]
    assert window is not None and len(window.pieces) == 2


def test_a_tick_closes_only_the_window_it_names() -> None:
    opened = add_material("conversations", None, [piece("hello", 4)], seq=4, stored_at=0,
                          limits=LIMITS).open
    stale = tick("conversations", opened, 3, seq=9, stored_at=70)
    assert stale.closed == [] and stale.open is opened
    due = tick("conversations", opened, 4, seq=9, stored_at=70)
    [closed] = due.closed
    assert (closed.closed_by, closed.closed_seq, closed.closed_at) == ("tick", 9, 70)
    assert due.open is None
    assert tick("conversations", None, 4, seq=10, stored_at=80).closed == []


def test_no_material_changes_nothing() -> None:
    opened = OpenWindow(1, 0.0, (piece("hi", 1),))
    fold = add_material("conversations", opened, [], seq=2, stored_at=999, limits=LIMITS)
    assert fold.open is opened and fold.closed == []


def test_the_window_id_is_its_material_not_the_time_it_closed() -> None:
    a = reflection("conversations", [piece("keep it short", 1)], seq=5, stored_at=10)
    b = reflection("conversations", [piece("keep it short", 1)], seq=6, stored_at=99)
    c = reflection("conversations", [piece("keep it shorter", 1)], seq=5, stored_at=10)
    assert a.window_id(["keep it short"]) == b.window_id(["keep it short"]) != c.window_id(
        ["keep it shorter"])
    # the id is the texts' as stored: sealed texts make another (keyed) id
    assert a.window_id(["hc1:c2VhbGVk"]) != a.window_id(["keep it short"])
    assert a.kind == "reflect" and a.closed_by == "reflection"


@given(st.lists(st.tuples(st.integers(1, 160), st.floats(0, 30)), min_size=1, max_size=40))
def test_every_piece_lands_in_exactly_one_window_in_order(
        events: list[tuple[int, float]]) -> None:
    window: OpenWindow | None = None
    closed = []
    at = 0.0
    for seq, (tokens, gap) in enumerate(events, start=1):
        at += gap
        fold = add_material("conversations", window, [piece(chars(tokens), seq)], seq=seq,
                            stored_at=at, limits=LIMITS)
        window = fold.open
        closed.extend(fold.closed)
        for w in fold.closed:  # only a lone oversized piece exceeds the token limit
            assert len(w.pieces) <= LIMITS.max_chunks
            assert len(w.pieces) == 1 or w.tokens <= LIMITS.window_tokens
    placed = [p.seq for w in closed for p in w.pieces] + (
        [p.seq for p in window.pieces] if window else [])
    assert placed == list(range(1, len(events) + 1))


def test_a_piece_survives_storage() -> None:
    p = piece("We ship before March.", 3, kind="document")
    assert Piece.from_dict(p.as_dict()) == p


# --------------------------------------------------------------------------- consequences


def row(pieces: list[Piece], kind: str = "extract") -> WindowRow:
    return WindowRow("acme", "dana", "w" * 64, "conversations", kind, pieces[-1].seq,
                     1_790_000_100.0, tuple(pieces), "ready", 0, 0.0)


def test_an_answer_publishes_its_candidates_then_the_summary_with_stable_ids() -> None:
    w = row([piece("I use Bun for scripts", 1), piece("and Astro for the site", 2)])
    chunks = chunks_of(w.pieces)
    answer = {"summary": "Uses Bun and Astro.", "facets": [
        {"class": "tooling", "key": "runtime", "value": "Bun", "cue_family": "explicit",
         "confidence": 0.9, "evidence": [{"chunk": "c1", "quote": "I use Bun"}]},
        {"class": "tooling", "key": "framework", "value": "Astro",
         "evidence": [{"chunk": "c2", "quote": "Astro for the site"}]},
        {"class": "mood", "key": "x", "value": "y",
         "evidence": [{"chunk": "c1", "quote": "Bun"}]}]}
    result = stored_result(validate_extraction(answer, chunks))
    events = window_events(w, result, "extract-v1", "qwen3:8b")
    assert [e.type for e in events] == ["CandidateEmitted", "CandidateEmitted",
                                        "SourceSummarised"]
    bun, astro, summary = events
    assert (bun.payload.value, bun.payload.observed_at) == ("bun", 1_790_000_001.0)
    assert (astro.payload.cue_family.value, astro.payload.initial_confidence) == (
        "behavioral", 0.5)  # the defaults when the model gives none
    assert [r.type for r in bun.payload.evidence] == ["turn", "source_summary"]
    assert (summary.payload.facets_emitted, summary.payload.facets_rejected) == (2, 1)
    assert all(e.occurred_at == w.closed_at and e.causation_id == "e2" for e in events)
    again = window_events(w, result, "extract-v1", "qwen3:8b")
    assert [e.event_id for e in again] == [e.event_id for e in events]
    other = window_events(w, result, "extract-v2", "qwen3:8b")
    assert {e.event_id for e in other}.isdisjoint({e.event_id for e in events})


def test_an_output_refused_whole_publishes_nothing() -> None:
    w = row([piece("hi", 1)])
    result, quarantined = bad_json_result("not json")
    assert window_events(w, result, "extract-v1", "m") == []
    assert [q[:2] for q in quarantined] == [(-1, "bad_json")]


def test_failed_windows_wait_longer_each_time_and_never_less_than_the_server_says() -> None:
    assert [retry_delay(n, 30.0, None) for n in (1, 2, 3)] == [30.0, 60.0, 120.0]
    assert retry_delay(20, 30.0, None) == 3600.0
    assert retry_delay(1, 30.0, 90.0) == 90.0


def test_sources_are_read_back_from_their_keys() -> None:
    assert source_key("document:plan-q3").key == "document:plan-q3"
    assert source_key("email").key == "email"
    assert source_key("email:gmail/c-1").key == "email:gmail/c-1"
    assert source_key("conversations").key == "conversations"
