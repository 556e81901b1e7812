"""The extractor's material (services/extractor/material.py): what becomes a chunk, who wrote
it, and the window hash that keeps a window from being sent twice."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from habitus.events.evidence import DocumentChunkRef, EmailMessageRef, TurnRef
from habitus.events.ingest import DocumentIngested, EmailObserved, ToolCall, TurnRecorded
from services.extractor.material import (
    MAX_CHUNK_CHARS,
    ChunkDraft,
    SourceKey,
    bounded,
    clean_text,
    drafts_of,
    estimate_tokens,
    fold_text,
    is_complex_turn,
    source_of,
    strip_quoted_reply,
    window_chunks,
    window_hash,
)


def _turn(user: str = "hi", assistant: str = "hello", tools: list[ToolCall] | None = None,
          session_id: str = "s1", turn_id: str = "t1") -> TurnRecorded:
    return TurnRecorded(
        session_id=session_id, turn_id=turn_id, channel="chat", user_message=user,
        assistant_message=assistant, user_at=1_700_000_000.0, assistant_at=1_700_000_012.5,
        tool_calls=tools or [],
    )


def _email(direction: str, body: str, subject: str = "Re: billing",
           to: list[str] | None = None) -> EmailObserved:
    return EmailObserved.model_validate({
        "message_id": "<m1@acme.io>", "direction": direction, "from": "dana@acme.io",
        "to": to if to is not None else ["sam@acme.io"], "subject": subject, "body": body,
        "sent_at": 1_700_000_100.0,
    })


# --------------------------------------------------------------------------- turns

def test_a_turn_is_a_user_chunk_and_an_assistant_chunk_without_tool_payloads() -> None:
    secret = "rows: alice@acme.io, bob@acme.io; API_KEY=sk-123"
    turn = _turn(
        user="Can you check why the nightly export failed? Use pnpm, not npm.",
        assistant="The export failed on a missing column; I fixed the query.",
        tools=[
            ToolCall(tool_name="postgres.query", ok=True, output_summary=secret),
            ToolCall(tool_name="shell", ok=False, output_summary="exit 1: permission denied"),
            ToolCall(tool_name="postgres.query", ok=True, output_summary=secret),
        ],
    )
    user, assistant = drafts_of(turn, occurred_at=5.0)
    assert user == ChunkDraft(
        "user_turn", TurnRef(session_id="s1", turn_id="t1"),
        "Can you check why the nightly export failed? Use pnpm, not npm.", 1_700_000_000.0,
    )
    assert user.own_words
    assert assistant.kind == "assistant_turn" and not assistant.own_words
    assert assistant.evidence == user.evidence
    assert assistant.occurred_at == 1_700_000_012.5
    assert assistant.text == (
        "The export failed on a missing column; I fixed the query.\n"
        "[tools called: postgres.query, shell]"
    )
    for chunk in (user, assistant):
        assert "sk-123" not in chunk.text and "permission denied" not in chunk.text


def test_empty_parts_of_a_turn_are_dropped_but_a_tools_only_answer_stays() -> None:
    [only_user] = drafts_of(_turn(user="Ship it.", assistant="  \n "), occurred_at=0)
    assert only_user.kind == "user_turn"
    [only_tools] = drafts_of(
        _turn(user=" ", assistant="", tools=[ToolCall(tool_name="git.push", ok=True)]),
        occurred_at=0,
    )
    assert (only_tools.kind, only_tools.text) == ("assistant_turn", "[tools called: git.push]")
    assert drafts_of(_turn(user="", assistant=""), occurred_at=0) == []


def test_a_long_tool_list_names_twenty_and_counts_the_rest() -> None:
    tools = [ToolCall(tool_name=f"tool{i}", ok=True) for i in range(25)]
    [_, assistant] = drafts_of(_turn(tools=tools), occurred_at=0)
    assert assistant.text.endswith("tool19 and 5 more]")
    assert "tool20" not in assistant.text


def test_is_complex_turn_on_a_tool_call_or_a_reply_over_500_characters() -> None:
    assert is_complex_turn(_turn(tools=[ToolCall(tool_name="search", ok=True)]))
    assert is_complex_turn(_turn(assistant="x" * 501))
    assert not is_complex_turn(_turn(assistant="x" * 500))
    assert not is_complex_turn(_turn(assistant="x" * 500 + "\n\n  "))


# --------------------------------------------------------------------------- email

def test_a_received_email_loses_its_quoted_reply_and_is_not_own_words() -> None:
    body = (
        "Thanks Sam, Thursday works for me.\n"
        "\n"
        "On Tue, Mar 5, 2024 at 9:14 AM Sam Rivera <sam@acme.io> wrote:\n"
        "> Can we move the billing sync to Thursday?\n"
        "> I prefer mornings.\n"
        "Anything after the header is history too.\n"
    )
    [chunk] = drafts_of(_email("received", body), occurred_at=0)
    assert chunk.kind == "received_email" and not chunk.own_words
    assert chunk.evidence == EmailMessageRef(message_id="<m1@acme.io>")
    assert chunk.occurred_at == 1_700_000_100.0
    assert chunk.text == (
        "From: dana@acme.io\nSubject: Re: billing\n\nThanks Sam, Thursday works for me.")


def test_a_sent_email_is_own_words_and_names_its_recipients() -> None:
    body = "Dana,\n\nI want the billing migration shipped before March.\n\n> old text\nSam"
    to = [f"p{i}@acme.io" for i in range(7)]
    [chunk] = drafts_of(_email("sent", body, subject="Billing", to=to), occurred_at=0)
    assert chunk.kind == "sent_email" and chunk.own_words
    assert chunk.text == (
        "To: p0@acme.io, p1@acme.io, p2@acme.io, p3@acme.io, p4@acme.io and 2 more\n"
        "Subject: Billing\n\n"
        "Dana,\n\nI want the billing migration shipped before March.\n\nSam"
    )


@pytest.mark.parametrize(
    "history",
    [
        "On Tue, Mar 5, 2024 at 9:14 AM Sam Rivera <\nsam@acme.io> wrote:\nold",
        "-----Original Message-----\nFrom: Sam\nold",
        "---------- Forwarded message ---------\nFrom: Sam <sam@acme.io>\nold",
        "________________________________\nFrom: Sam Rivera\nSent: Tuesday, March 5\nold",
        "From: Sam Rivera <sam@acme.io>\nDate: Tue, 5 Mar 2024\nSubject: billing\n\nold",
        "> old\n>> older",
    ],
)
def test_reply_history_in_its_common_shapes_is_dropped(history: str) -> None:
    stripped = strip_quoted_reply(f"New text here.\n\n{history}")
    assert "old" not in stripped
    assert stripped.strip().startswith("New text here.")


def test_a_sentence_starting_with_from_is_not_a_header() -> None:
    body = "From: the team's point of view, Thursday is best.\nLet me know."
    assert strip_quoted_reply(body) == body


def test_an_email_with_nothing_new_makes_no_chunk_but_a_subject_alone_does() -> None:
    assert drafts_of(_email("received", "> only quoted", subject=""), occurred_at=0) == []
    [chunk] = drafts_of(_email("sent", "> only quoted", subject="FYI", to=[]), occurred_at=0)
    assert chunk.text == "Subject: FYI"


# --------------------------------------------------------------------------- documents, text

def test_a_document_chunk_is_one_chunk_at_the_events_time() -> None:
    doc = DocumentIngested(source_id="drive:cv", chunk_id="p1", text="Sam Rivera, Staff Engineer")
    [chunk] = drafts_of(doc, occurred_at=1_650_000_000.0)
    assert chunk == ChunkDraft(
        "document", DocumentChunkRef(source_id="drive:cv", chunk_id="p1"),
        "Sam Rivera, Staff Engineer", 1_650_000_000.0,
    )
    assert not chunk.own_words
    assert drafts_of(DocumentIngested(source_id="d", chunk_id="c", text=" \n"), occurred_at=0) == []


def test_long_text_is_cut_at_a_word_boundary_with_an_ellipsis() -> None:
    text = "word " * 2000
    out = bounded(clean_text(text))
    assert len(out) <= MAX_CHUNK_CHARS
    assert out.endswith("word \u2026")
    [chunk] = drafts_of(DocumentIngested(source_id="d", chunk_id="c", text=text), occurred_at=0)
    assert chunk.text == out
    unbroken = "x" * 5000
    assert bounded(unbroken) == "x" * (MAX_CHUNK_CHARS - 2) + " \u2026"
    assert bounded("short") == "short"


def test_clean_text_normalises_line_ends_controls_and_composition() -> None:
    decomposed = "Cafe\u0301\r\nline\x00two\t\tend   \n\n\n\nlast"
    assert clean_text(decomposed) == "Caf\u00e9\nlinetwo  end\n\nlast"


def test_sources_and_their_keys() -> None:
    assert source_of(_turn()) == SourceKey("conversations", "conversations")
    assert source_of(_turn()).key == "conversations"
    assert source_of(_email("received", "x")).key == "email"
    mailbox = _email("received", "x").model_copy(
        update={"toolkit": "gmail", "connection_id": "work"})
    assert source_of(mailbox) == SourceKey("email", "gmail/work")
    assert source_of(mailbox).key == "email:gmail/work"
    doc = DocumentIngested(source_id="drive:cv", chunk_id="p1", text="x")
    assert source_of(doc) == SourceKey("document", "drive:cv")
    assert source_of(doc).key == "document:drive:cv"


def test_estimate_tokens_is_a_quarter_of_the_characters_rounded_up() -> None:
    assert [estimate_tokens(t) for t in ("", "abc", "abcd", "abcde", "x" * 400)] == [
        1, 1, 1, 2, 100]


# --------------------------------------------------------------------------- windows

def _drafts() -> list[ChunkDraft]:
    turn = _turn(user="Use Bun.", assistant="Done.", tools=[ToolCall(tool_name="bun", ok=True)])
    doc = DocumentIngested(source_id="drive:cv", chunk_id="p1", text="Sam Rivera")
    return drafts_of(turn, occurred_at=0) + drafts_of(doc, occurred_at=9.0)


def test_window_chunks_are_numbered_c1_to_cn_in_order() -> None:
    drafts = _drafts()
    chunks = window_chunks(drafts)
    assert [c.ref for c in chunks] == ["c1", "c2", "c3"]
    assert [(c.kind, c.text, c.evidence, c.occurred_at) for c in chunks] == [
        (d.kind, d.text, d.evidence, d.occurred_at) for d in drafts]
    assert [c.key for c in chunks] == [d.key for d in drafts]
    assert [c.own_words for c in chunks] == [True, False, False]


def test_chunk_keys_are_unique_even_when_ids_contain_separators() -> None:
    a = ChunkDraft("user_turn", TurnRef(session_id="a/b", turn_id="c"), "x", 0)
    b = ChunkDraft("user_turn", TurnRef(session_id="a", turn_id="b/c"), "x", 0)
    assert a.key == "user_turn:a%2Fb/c"
    assert a.key != b.key
    user, assistant = drafts_of(_turn(), occurred_at=0)
    assert user.key == "user_turn:s1/t1" and assistant.key == "assistant_turn:s1/t1"


def test_a_draft_serialises_to_json_ready_values() -> None:
    [draft] = drafts_of(_email("sent", "Hi"), occurred_at=0)
    assert draft.as_dict() == {
        "kind": "sent_email",
        "evidence": {"type": "email_message", "message_id": "<m1@acme.io>"},
        "text": "To: sam@acme.io\nSubject: Re: billing\n\nHi",
        "occurred_at": 1_700_000_100.0,
    }


def test_window_hash_is_stable_and_sensitive_to_every_input() -> None:
    keys, texts = ["user_turn:s1/t1", "assistant_turn:s1/t1"], ["Use Bun.", "Done."]
    base = window_hash("conversations", "extract", keys, texts, "extract-v1")
    # pinned: a replay in another process (or after an upgrade) must find the stored result
    assert base == window_hash("conversations", "extract", list(keys), list(texts), "extract-v1")
    assert base == "d985b4658936f1442e0ace739b3b764eb18054aa3de22005d86f3d00350cfb2d"
    variants = [
        window_hash("conversations", "extract", keys, ["Use Bun!", "Done."], "extract-v1"),
        window_hash("conversations", "extract", keys[::-1], texts[::-1], "extract-v1"),
        window_hash("conversations", "extract", keys, texts, "extract-v2"),
        window_hash("conversations", "reflect", keys, texts, "extract-v1"),
        window_hash("email", "extract", keys, texts, "extract-v1"),
        window_hash("conversations", "extract", ["user_turn:s1/t2", keys[1]], texts, "extract-v1"),
        window_hash("conversations", "extract", keys, ["Use Bun.D", "one."], "extract-v1"),
    ]
    assert len({base, *variants}) == 1 + len(variants)


def test_window_hash_refuses_keys_and_texts_that_do_not_pair_up() -> None:
    with pytest.raises(ValueError, match="2 chunk keys for 1 texts"):
        window_hash("email", "extract", ["a", "b"], ["x"], "extract-v1")


# --------------------------------------------------------------------------- folding

@pytest.mark.parametrize(
    ("text", "folded"),
    [
        ("  Hello\n\t World  ", "hello world"),
        ("I\u2019m \u201cfine\u201d \u2014 really", "i'm \"fine\" - really"),
        ("\uff29\uff27\uff2e\uff2f\uff32\uff25 in\u200bstructions", "ignore instructions"),
        ("Stra\u00dfe \ufb01le", "strasse file"),
    ],
)
def test_fold_text(text: str, folded: str) -> None:
    assert fold_text(text)[0] == folded


def test_fold_text_can_keep_line_breaks() -> None:
    assert fold_text("one  \n\n two three", keep_newlines=True)[0] == "one\ntwo three"


@hsettings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=60))
def test_every_folded_character_maps_back_to_its_source_in_order(text: str) -> None:
    folded, origin = fold_text(text)
    assert len(origin) == len(folded)
    assert list(origin) == sorted(origin)
    assert all(0 <= i < len(text) for i in origin)
    assert folded == folded.strip() and "  " not in folded
