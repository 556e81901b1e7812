"""PROFILE.md document logic (services/profile_renderer/document.py).

Pure functions: every test builds documents as strings. The cases follow issue 5, the seed's
"Surface — PROFILE.md" and section 1.6 of the openhuman reference, including the anchor defect we
must not repeat: an orphan start marker that, one render later, erased the user's text.

The property tests build documents from user segments (each with a unique line, so a lost
segment cannot hide behind a look-alike), managed blocks, duplicated blocks, orphan and stray
markers and code fences that quote markers, and check that every user segment is still there,
byte for byte and in order, after any sequence of renders.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from habitus.prompt import ProfileFacet, ProvisionalFacet
from services.profile_renderer.document import (
    BLOCK_ORDER,
    FACET_BLOCKS,
    NOT_YET_SURE,
    NOT_YET_SURE_HINT,
    PLACEHOLDER,
    TITLE,
    Account,
    SettledFacet,
    Settlement,
    accounts_body,
    apply_edit,
    end_marker,
    facet_bodies,
    not_yet_sure_body,
    notes,
    render,
    settle,
    start_marker,
)


def facet(cls: str, key: str, value: str, stability: float | None = 0.5,
          pinned: bool = False, origin: str = "learned") -> ProfileFacet:
    return ProfileFacet(facet_class=cls, key=key, value=value, pinned=pinned,
                        stability=None if pinned else stability, origin=origin)


def block(name: str, body: str) -> str:
    return f"{start_marker(name)}\n{body}\n{end_marker(name)}"


STYLE_BODY = "## Style\n\n- **verbosity**: terse\n- **preamble**: skip *(set by the user)*\n"
STYLE_BLOCK = (
    "<!-- habitus:style:start -->\n"
    "## Style\n"
    "\n"
    "- **verbosity**: terse\n"
    "- **preamble**: skip *(set by the user)*\n"
    "\n"
    "<!-- habitus:style:end -->"
)
FACETS = [
    facet("style", "verbosity", "terse", 0.9),
    facet("style", "preamble", "skip", pinned=True),
    facet("identity", "name", "Alice", 0.8),
    facet("identity", "timezone", "PST", 0.8),
    facet("tooling", "lang", "rust", 0.7),
    facet("goal", "learn-rust", "Learn Rust this year", 0.6),
    facet("channel", "primary", "desktop-chat", 0.99),
]
ACCOUNTS = [Account("slack", "alice@acme"), Account("gmail", "a@b.c")]
UNSURE = [
    ProvisionalFacet("style", "language", "de", 0.4, ("1 email signature", "2 chat turns")),
    ProvisionalFacet("identity", "role", "engineer", 0.3, ("1 email signature",)),
    ProvisionalFacet("tooling", "editor", "vim", 0.2, ()),
]


def full_bodies() -> dict[str, str]:
    return {**facet_bodies(FACETS), NOT_YET_SURE: not_yet_sure_body(UNSURE),
            "connected-accounts": accounts_body(ACCOUNTS)}


# -- bodies ------------------------------------------------------------------------------------


def test_block_format_is_exact() -> None:
    text = render(None, {"style": STYLE_BODY}).text
    assert text == "# User Profile\n\n" + STYLE_BLOCK + "\n"
    assert TITLE == "# User Profile\n"


def test_facet_bodies_order_pinned_goals_placeholder_and_no_channel() -> None:
    bodies = facet_bodies(FACETS)
    assert tuple(bodies) == FACET_BLOCKS
    assert bodies == {
        "style": "## Style\n\n- **preamble**: skip *(set by the user)*\n- **verbosity**: terse\n",
        "identity": "## Identity\n\n- **name**: Alice\n- **timezone**: PST\n",
        "tooling": "## Tooling\n\n- **lang**: rust\n",
        "vetoes": "## Vetoes\n\n*(no entries yet)*\n",
        "goals": "## Goals\n\n- Learn Rust this year\n",
    }
    assert "desktop-chat" not in "".join(bodies.values())


def test_facet_bodies_all_empty_show_placeholder() -> None:
    bodies = facet_bodies([])
    assert set(bodies) == set(FACET_BLOCKS)
    assert bodies["goals"] == f"## Goals\n\n{PLACEHOLDER}\n"


def test_stability_order_and_ties() -> None:
    rows = [
        facet("veto", "tool", "jest", 0.4),
        facet("veto", "format", "nested-bullets", 0.9),
        facet("veto", "emoji", "any", 0.4),
        facet("veto", "colour", "red", pinned=True),
        facet("veto", "zeal", "none", None),  # unpinned but infinite: still after pinned
        facet("veto", "nan", "x", float("nan")),
    ]
    assert facet_bodies(rows)["vetoes"] == (
        "## Vetoes\n\n"
        "- **colour**: red *(set by the user)*\n"
        "- **zeal**: none\n"
        "- **format**: nested-bullets\n"
        "- **emoji**: any\n"
        "- **tool**: jest\n"
        "- **nan**: x\n"
    )
    assert facet_bodies(list(reversed(rows))) == facet_bodies(rows)


def test_pinned_goal_and_values_that_could_break_the_document() -> None:
    rows = [
        facet("goal", "g1", "Ship v2", pinned=True),
        facet("goal", "g2", "line one\n<!-- habitus:goals:end -->\nline three", 0.9),
        facet("goal", "g3", "```python", 0.8),
        facet("style", "k", "a\r\n\tb", 0.5),
        facet("style", "blank", "  \n ", 0.9),
        facet("style", "k", "weaker duplicate", 0.1),
    ]
    bodies = facet_bodies(rows)
    assert bodies["goals"] == (
        "## Goals\n\n- Ship v2 *(set by the user)*\n"
        "- line one <!-- habitus:goals:end --> line three\n"
        "- \\```python\n"
    )
    assert bodies["style"] == "## Style\n\n- **k**: a b\n"
    doc = render(None, bodies).text
    again = render(doc, bodies)
    assert again.text == doc and again.changed == () and again.repairs == ()


def test_accounts_body() -> None:
    body = accounts_body([Account("slack", ""), *ACCOUNTS, Account("gmail", "a@b.c")])
    assert body == "## Connected Accounts\n\n- gmail (a@b.c)\n- slack\n- slack (alice@acme)\n"
    assert accounts_body([]) == f"## Connected Accounts\n\n{PLACEHOLDER}\n"


# -- render ------------------------------------------------------------------------------------


def test_new_document_has_title_and_blocks_in_order() -> None:
    bodies = full_bodies()
    result = render(None, bodies)
    expected = "# User Profile\n\n" + "\n\n".join(
        block(name, bodies[name]) for name in BLOCK_ORDER) + "\n"
    assert result.text == expected
    assert result.changed == BLOCK_ORDER and result.repairs == ()
    assert render("  \n", bodies).text == expected
    assert render(None, {}).text == TITLE


def test_rerender_is_idempotent() -> None:
    first = render(None, full_bodies())
    second = render(first.text, full_bodies())
    assert second.text == first.text
    assert second.changed == () and second.repairs == ()


def test_unchanged_render_returns_the_document_untouched_even_with_odd_spacing() -> None:
    bodies = facet_bodies(FACETS)
    doc = render(None, bodies).text.replace("-->\n\n<!--", "-->\n\n\n\n<!--") + "\n\n\n"
    result = render(doc, bodies)
    assert result.text == doc and result.changed == ()


def test_only_changed_blocks_are_reported() -> None:
    doc = render(None, facet_bodies(FACETS)).text
    more = [*FACETS, facet("veto", "tool", "jest", 0.5)]
    result = render(doc, facet_bodies(more))
    assert result.changed == ("vetoes",)
    assert "- **tool**: jest\n" in result.text


def test_connected_accounts_untouched_by_facet_rerender_and_vice_versa() -> None:
    doc = render(None, full_bodies()).text
    # Hand-edited accounts block: a facet render must not "fix" it.
    doc = doc.replace("- gmail (a@b.c)\n", "- gmail (a@b.c)\n- hand edit\n")
    after = render(doc, facet_bodies([facet("style", "verbosity", "chatty", 0.9)]))
    assert "- hand edit\n" in after.text
    assert after.changed == ("style", "identity", "tooling", "goals")
    start = after.text.index(start_marker("connected-accounts"))
    assert after.text[start:] == doc[doc.index(start_marker("connected-accounts")):]
    # And an accounts sync leaves every facet block byte for byte.
    synced = render(after.text, {"connected-accounts": accounts_body([Account("notion", "")])})
    assert synced.changed == ("connected-accounts",)
    cut = synced.text.index(start_marker("connected-accounts"))
    assert synced.text[:cut] == after.text[:cut]


def test_hand_edit_inside_a_block_is_restored_and_reported_changed() -> None:
    doc = render(None, facet_bodies(FACETS)).text
    edited = doc.replace("- **name**: Alice", "- **name**: Mallory")
    result = render(edited, facet_bodies(FACETS))
    assert result.text == doc and result.changed == ("identity",)


def test_user_text_before_between_and_after_blocks_is_kept() -> None:
    bodies = facet_bodies(FACETS)
    doc = render(None, bodies).text
    doc = ("# My Profile  \nintro line\n\n"
           + doc.removeprefix("# User Profile\n\n").replace(
               end_marker("identity"), end_marker("identity") + "\n\n  between  \n\tindented")
           + "\n\ntrailing words without newline")
    result = render(doc, facet_bodies([*FACETS, facet("veto", "x", "y", 0.1)]))
    assert result.text.startswith("# My Profile  \nintro line\n\n" + start_marker("style"))
    assert "\n\n  between  \n\tindented\n\n" + start_marker("tooling") in result.text
    assert result.text.endswith("\n\ntrailing words without newline")


def test_missing_block_is_added_in_block_order() -> None:
    bodies = full_bodies()
    doc = ("# User Profile\n\nmy notes\n\n" + block("goals", bodies["goals"]) + "\n\nmiddle\n\n"
           + block("connected-accounts", bodies["connected-accounts"]) + "\n\nend notes\n")
    result = render(doc, {**facet_bodies(FACETS), NOT_YET_SURE: bodies[NOT_YET_SURE]})
    positions = [result.text.index(start_marker(name)) for name in BLOCK_ORDER]
    assert positions == sorted(positions)
    assert result.changed == ("style", "identity", "tooling", "vetoes", NOT_YET_SURE)
    # a document from before the block gets it right after goals, the user's text after it
    assert f"{end_marker('goals')}\n\n{start_marker(NOT_YET_SURE)}" in result.text
    assert result.text.index(end_marker(NOT_YET_SURE)) < result.text.index("middle")
    for text in ("my notes", "middle", "end notes\n"):
        assert text in result.text
    assert render(result.text, facet_bodies(FACETS)).changed == ()


def test_crlf_user_text_is_kept() -> None:
    doc = "Line one\r\nLine two\r\n"
    result = render(doc, {"style": STYLE_BODY})
    assert result.text == "Line one\r\nLine two\n\n" + STYLE_BLOCK + "\n"


def test_render_refuses_bodies_that_would_break_the_document() -> None:
    with pytest.raises(ValueError):
        render(None, {"channel": "## Channel\n"})
    with pytest.raises(ValueError):
        render(None, {"style": "## Style\n\n" + end_marker("style") + "\n"})
    with pytest.raises(ValueError):
        render(None, {"style": "## Style\n\n```\n"})


# -- repairs -----------------------------------------------------------------------------------


def test_anchor_defect_orphan_start_does_not_erase_user_text() -> None:
    doc = "# User Profile\n\n" + start_marker("style") + "\nMy own text\n\nMore of it\n"
    bodies = facet_bodies(FACETS)
    first = render(doc, bodies)
    assert first.repairs == (
        "removed orphan start marker of 'style' at line 3 (no end marker follows)",)
    assert "My own text\n\nMore of it" in first.text
    second = render(first.text, bodies)
    assert "My own text\n\nMore of it" in second.text
    assert second.changed == () and second.repairs == () and second.text == first.text
    assert second.text.count(start_marker("style")) == 1


def test_document_left_by_the_anchor_first_render_keeps_the_text() -> None:
    # What the anchor wrote after one render: the orphan, the user's text, then a fresh block.
    doc = start_marker("style") + "\nprecious\n\n" + STYLE_BLOCK + "\n"
    result = render(doc, {"style": STYLE_BODY})
    assert result.text == "precious\n\n" + STYLE_BLOCK + "\n"
    assert len(result.repairs) == 1 and "orphan start marker of 'style' at line 1" in \
        result.repairs[0]


def test_stray_end_and_end_before_start_are_removed_text_kept() -> None:
    doc = ("A\n" + end_marker("goals") + "\nB\n  " + start_marker("goals") + "  \nC\n")
    result = render(doc, {"style": STYLE_BODY})
    assert result.text == "A\nB\nC\n\n" + STYLE_BLOCK + "\n"
    assert result.repairs == (
        "removed stray end marker of 'goals' at line 2 (no start marker before it)",
        "removed orphan start marker of 'goals' at line 4 (no end marker follows)",
    )
    assert result.changed == ("style",)


def test_mismatched_pair_and_unknown_marker_break_a_block() -> None:
    doc = (start_marker("style") + "\nX\n" + end_marker("identity") + "\nY\n"
           + start_marker("goals") + "\n<!-- habitus:custom:start -->\nZ\n" + end_marker("goals")
           + "\n")
    result = render(doc, {})
    assert result.text == "X\nY\n<!-- habitus:custom:start -->\nZ\n"
    assert len(result.repairs) == 4
    assert render(result.text, {}).repairs == ()


def test_duplicate_block_is_removed_and_reported() -> None:
    old = "## Style\n\n- **verbosity**: chatty\n"
    doc = ("notes\n\n" + block("style", old) + "\n\nbetween\n\n" + block("style", old)
           + "\n\nafter\n")
    result = render(doc, {"style": STYLE_BODY})
    assert result.text == "notes\n\n" + STYLE_BLOCK + "\n\nbetween\n\n\nafter\n"
    assert result.repairs == (
        "removed duplicate 'style' block at lines 12-17 (the one at line 3 is kept)",)
    assert result.changed == ("style",)
    again = render(result.text, {"style": STYLE_BODY})
    assert again.text == result.text and again.repairs == ()


def test_markers_inside_code_fences_are_user_text() -> None:
    quoted = "```markdown\n" + STYLE_BLOCK + "\n```"
    listed = "- ~~~~\n  " + end_marker("goals") + "\n  ~~~~"
    doc = "How the file looks:\n\n" + quoted + "\n\n" + listed + "\n"
    result = render(doc, {"style": STYLE_BODY, "goals": "## Goals\n\n- g\n"})
    assert result.repairs == ()
    assert result.text.startswith(doc.rstrip("\n") + "\n\n" + STYLE_BLOCK)
    assert render(result.text, {"style": STYLE_BODY, "goals": "## Goals\n\n- g\n"}).changed == ()
    assert quoted in notes(result.text) and listed in notes(result.text)


def test_unclosed_fence_does_not_make_every_render_append_a_block() -> None:
    doc = "notes\n```\ncode that never closes\n"
    first = render(doc, {"style": STYLE_BODY})
    second = render(first.text, {"style": STYLE_BODY})
    assert second.text == first.text and second.changed == ()
    assert first.text.count(start_marker("style")) == 1


def test_unknown_blocks_are_user_text() -> None:
    custom = "<!-- habitus:custom:start -->\nmine\n<!-- habitus:custom:end -->"
    doc = custom + "\n<!-- habitus:other:end -->\n"
    result = render(doc, {"style": STYLE_BODY})
    assert result.repairs == ()
    assert result.text == doc.rstrip("\n") + "\n\n" + STYLE_BLOCK + "\n"


# -- notes -------------------------------------------------------------------------------------


def test_notes_are_the_text_outside_blocks_without_title() -> None:
    doc = render(None, full_bodies()).text
    assert notes(doc) == ""
    doc = doc.replace(end_marker("identity") + "\n", end_marker("identity") + "\n\nfirst\n")
    doc += "\nsecond\n- with a list\n"
    assert notes(doc) == "first\n\nsecond\n- with a list"
    assert notes("Intro\n# User Profile\n") == "Intro\n# User Profile"
    assert notes("\n  # User Profile  \nbody\n") == "body"
    assert notes(start_marker("style") + "\nkept after orphan\n") == "kept after orphan"


# -- apply_edit --------------------------------------------------------------------------------


def test_apply_edit_takes_outside_text() -> None:
    current = render(None, full_bodies()).text
    edited = current.replace("# User Profile\n\n", "# User Profile\n\nI prefer mornings.\n\n")
    edited += "\nP.S. thanks\n"
    result = apply_edit(current, edited)
    assert result.text == edited and result.ignored == ()
    assert notes(result.text) == "I prefer mornings.\n\nP.S. thanks"


def test_apply_edit_ignores_and_reports_block_edits() -> None:
    current = render(None, full_bodies()).text
    edited = current.replace("- **name**: Alice", "- **name**: Bob") + "\nnew note\n"
    edited = edited.replace("- gmail (a@b.c)\n", "")
    result = apply_edit(current, edited)
    assert result.ignored == ("identity", "connected-accounts")
    assert result.text == current + "\nnew note\n"


def test_apply_edit_whitespace_only_change_inside_block_is_not_an_edit() -> None:
    current = render(None, facet_bodies(FACETS)).text
    edited = current.replace("- **name**: Alice\n", "- **name**: Alice   \n")
    result = apply_edit(current, edited)
    assert result.ignored == () and result.text == current


def test_apply_edit_restores_deleted_and_broken_blocks_keeping_text() -> None:
    current = render(None, full_bodies()).text
    bodies = full_bodies()
    # Goals deleted outright, style's end marker deleted: its old rows become the user's text.
    edited = (current.replace(block("goals", bodies["goals"]) + "\n\n", "")
              .replace(end_marker("style") + "\n", "my note\n"))
    result = apply_edit(current, edited)
    assert result.ignored == ("style", "goals")
    assert "my note" in result.text
    assert result.text.count(start_marker("style")) == 1
    assert result.text.count(block("goals", bodies["goals"])) == 1
    positions = [result.text.index(start_marker(name)) for name in BLOCK_ORDER]
    assert positions == sorted(positions)


def test_apply_edit_keeps_moved_blocks_where_the_user_put_them_and_drops_invented_ones() -> None:
    bodies = facet_bodies(FACETS)
    current = render("intro\n", {"style": bodies["style"], "goals": bodies["goals"]}).text
    edited = (block("goals", bodies["goals"]) + "\n\nintro\n\n" + block("style", bodies["style"])
              + "\n\n" + block("vetoes", "## Vetoes\n\n- made up\n") + "\n\noutro\n")
    result = apply_edit(current, edited)
    assert result.ignored == ("vetoes",)
    assert result.text == (block("goals", bodies["goals"]) + "\n\nintro\n\n"
                           + block("style", bodies["style"]) + "\n\noutro\n")


# -- the set-by-user marker -------------------------------------------------------------------


def test_only_what_the_user_set_is_marked_and_it_comes_first() -> None:
    rows = [
        facet("style", "tone", "dry", 0.9, origin="stated"),
        facet("style", "emoji", "none", 0.2, origin="set_by_user"),
        facet("style", "preamble", "skip", pinned=True),
        facet("style", "verbosity", "terse", 0.8),
        facet("identity", "name", "Alice", 0.7, origin="provider"),
    ]
    bodies = facet_bodies(rows)
    assert bodies["style"] == (
        "## Style\n\n"
        "- **preamble**: skip *(set by the user)*\n"
        "- **emoji**: none *(set by the user)*\n"
        "- **tone**: dry\n"
        "- **verbosity**: terse\n"
    )
    assert bodies["identity"] == "## Identity\n\n- **name**: Alice\n"
    assert "pinned" not in "".join(bodies.values())


# -- the not-yet-sure block --------------------------------------------------------------------

UNSURE_BODY = (
    "## Not yet sure\n\n"
    f"{NOT_YET_SURE_HINT}\n\n"
    "- **style/language**: German \u2014 1 email signature, 2 chat turns\n"
    "- **identity/role**: engineer \u2014 1 email signature\n"
    "- **tooling/editor**: Vim\n"
)
ROWS = {
    "language": "- **style/language**: German \u2014 1 email signature, 2 chat turns",
    "role": "- **identity/role**: engineer \u2014 1 email signature",
    "editor": "- **tooling/editor**: Vim",
}
LANGUAGE = SettledFacet("style", "language", "de")
ROLE = SettledFacet("identity", "role", "engineer")
EDITOR = SettledFacet("tooling", "editor", "vim")


def test_not_yet_sure_block_exact_format() -> None:
    assert NOT_YET_SURE_HINT == ("*Move a line into your profile above to confirm it, or delete "
                                 "it to forget it.*")
    assert not_yet_sure_body(UNSURE) == UNSURE_BODY
    assert not_yet_sure_body(list(reversed(UNSURE))) == UNSURE_BODY
    doc = render(None, full_bodies()).text
    assert block(NOT_YET_SURE, UNSURE_BODY) in doc
    assert doc.index(end_marker("goals")) < doc.index(start_marker(NOT_YET_SURE)) \
        < doc.index(start_marker("connected-accounts"))


def test_not_yet_sure_block_empty_strongest_once_no_channel_one_line() -> None:
    assert not_yet_sure_body([]) == f"## Not yet sure\n\n{PLACEHOLDER}\n"
    rows = [
        ProvisionalFacet("style", "verbosity", "detailed", 0.1, ("1 chat turn",)),
        ProvisionalFacet("style", "verbosity", "terse", 0.4, ("2 chat turns",)),
        ProvisionalFacet("channel", "primary", "sms", 0.9, ("3 chat turns",)),
        ProvisionalFacet("identity", "team", " \n ", 0.9, ()),
        ProvisionalFacet("goal", "g", "ship\n<!-- habitus:not-yet-sure:end -->", 0.2,
                         ("a\nb", " ")),
    ]
    assert not_yet_sure_body(rows) == (
        "## Not yet sure\n\n"
        f"{NOT_YET_SURE_HINT}\n\n"
        "- **style/verbosity**: terse \u2014 2 chat turns\n"
        "- **goal/g**: ship <!-- habitus:not-yet-sure:end --> \u2014 a b\n"
    )
    doc = render(None, {NOT_YET_SURE: not_yet_sure_body(rows)}).text
    assert render(doc, {NOT_YET_SURE: not_yet_sure_body(rows)}).changed == ()


def test_a_value_the_vocabulary_cannot_word_is_shown_as_stored() -> None:
    # "german" predates language tags: value_text raises on it; the block must still render
    body = not_yet_sure_body([ProvisionalFacet("style", "language", "german", 0.3, ())])
    assert "- **style/language**: german\n" in body


def _unsure_doc(notes_text: str = "My notes.") -> str:
    return render(f"# User Profile\n\n{notes_text}\n", full_bodies()).text


def _without(doc: str, *rows: str) -> str:
    for row in rows:
        assert doc.count(row + "\n") == 1
        doc = doc.replace(row + "\n", "")
    return doc


def test_settle_a_deleted_line_is_removed_a_line_moved_into_the_notes_promoted() -> None:
    base = _unsure_doc()
    edited = _without(base, ROWS["language"], ROWS["role"]).replace(
        "My notes.", "My notes.\n" + ROWS["role"])
    settled = settle(base, edited, UNSURE)
    assert settled.promoted == (ROLE,) and settled.removed == (LANGUAGE,)
    assert settled.lines == {ROWS["language"], ROWS["role"]}
    # the edit was taken, as commands: not reported as an ignored edit of the block
    assert apply_edit(base, edited, settled.lines).ignored == ()
    assert apply_edit(base, edited).ignored == (NOT_YET_SURE,)
    # the moved line is the user's text now, kept where they put it; the block comes back
    # from the current document until the commands change what it lists
    merged = apply_edit(base, edited, settled.lines).text
    assert "My notes.\n" + ROWS["role"] in merged
    assert block(NOT_YET_SURE, UNSURE_BODY) in merged


def test_settle_a_line_moved_into_a_facet_block_evidence_trimmed_is_promoted() -> None:
    base = _unsure_doc()
    moved = "- **tooling/editor**: Vim"
    trimmed = "* **identity/role**:   engineer"
    edited = _without(base, ROWS["editor"], ROWS["role"])
    edited = edited.replace("- **lang**: rust\n", f"- **lang**: rust\n{moved}\n{trimmed}\n")
    settled = settle(base, edited, UNSURE)
    assert settled.promoted == (ROLE, EDITOR) and settled.removed == ()
    assert apply_edit(base, edited, settled.lines).ignored == ()
    assert apply_edit(base, edited).ignored == ("tooling", NOT_YET_SURE)


def test_settle_the_value_is_the_facets_not_its_text() -> None:
    settled = settle(_unsure_doc(), _without(_unsure_doc(), ROWS["language"]), UNSURE)
    assert settled.removed == (SettledFacet("style", "language", "de"),)


def test_settle_nothing_changed_or_only_other_edits() -> None:
    base = _unsure_doc()
    assert settle(base, base, UNSURE) == Settlement()
    edited = base.replace("My notes.", "Other notes.").replace("- **name**: Alice", "- Bob")
    assert settle(base, edited, UNSURE) == Settlement()
    reordered = base.replace(ROWS["language"] + "\n" + ROWS["role"],
                             ROWS["role"] + "\n" + ROWS["language"])
    assert settle(base, reordered, UNSURE) == Settlement()
    assert apply_edit(base, reordered).ignored == (NOT_YET_SURE,)


def test_settle_an_edited_line_is_neither_confirmed_nor_forgotten() -> None:
    base = _unsure_doc()
    in_place = base.replace("**identity/role**: engineer", "**identity/role**: manager")
    assert settle(base, in_place, UNSURE) == Settlement()
    assert apply_edit(base, in_place).ignored == (NOT_YET_SURE,)
    extended = base.replace("**identity/role**: engineer", "**identity/role**: engineering")
    assert settle(base, extended, UNSURE) == Settlement()
    # moved and rewritten on the way: the user gave another value, which is no yes
    rewritten = _without(base, ROWS["role"]).replace(
        "My notes.", "My notes.\n- **identity/role**: staff engineer")
    assert settle(base, rewritten, UNSURE) == Settlement()


def test_settle_duplicate_lines() -> None:
    base = _unsure_doc()
    # copied into the notes, still in the block: a copy, not a move
    copied = base.replace("My notes.", "My notes.\n" + ROWS["role"])
    assert settle(base, copied, UNSURE) == Settlement()
    # duplicated inside the block, then one copy deleted: still in the block
    doubled = base.replace(ROWS["role"] + "\n", ROWS["role"] + "\n" + ROWS["role"] + "\n")
    assert settle(base, doubled, UNSURE) == Settlement()
    # moved into the notes twice: confirmed once
    twice = _without(base, ROWS["role"]).replace(
        "My notes.", f"My notes.\n{ROWS['role']}\n\n{ROWS['role']}")
    assert settle(base, twice, UNSURE).promoted == (ROLE,)
    # already in the notes before the edit, now deleted from the block: the line is still
    # there, so it is not forgotten, and no new copy was made, so it is not confirmed
    noted = _unsure_doc("My notes.\n" + ROWS["role"])
    cut = noted.index(start_marker(NOT_YET_SURE))
    from_block = noted[:cut] + _without(noted[cut:], ROWS["role"])
    assert settle(noted, from_block, UNSURE) == Settlement()


def test_settle_a_missing_broken_or_duplicated_block_settles_nothing() -> None:
    base = _unsure_doc()
    whole = block(NOT_YET_SURE, UNSURE_BODY)
    deleted = base.replace(whole + "\n\n", "")
    broken = base.replace(end_marker(NOT_YET_SURE) + "\n", "")  # every row is loose text now
    duplicated = base.replace(whole, whole + "\n\n" + block(NOT_YET_SURE, "## Not yet sure\n"))
    emptied_twice = base.replace(whole, block(NOT_YET_SURE, "## Not yet sure\n") + "\n\n"
                                 + whole)
    for edited in (deleted, broken, duplicated, emptied_twice):
        assert settle(base, edited, UNSURE) == Settlement()
        assert NOT_YET_SURE in apply_edit(base, edited).ignored
    assert settle(render(None, facet_bodies(FACETS)).text, base, UNSURE) == Settlement()


def test_settle_reads_the_edit_against_the_document_the_user_saw() -> None:
    seen = render(None, {**facet_bodies(FACETS), NOT_YET_SURE: not_yet_sure_body(UNSURE[:2])})
    newer = [*UNSURE, ProvisionalFacet("identity", "team", "billing", 0.35, ("2 chat turns",))]
    edited = _without(seen.text, ROWS["role"])
    # a render since added identity/team and tooling/editor, which the user never saw: their
    # absence from the edit is no deletion; only the line the user deleted is forgotten
    settled = settle(seen.text, edited, newer)
    assert settled == Settlement((), (ROLE,), frozenset({ROWS["role"]}))
    # a facet that stopped being not yet sure since (it became active, or was forgotten) is
    # no one's to settle any more
    assert settle(seen.text, edited, [UNSURE[0]]) == Settlement()


_ACTIONS = st.sampled_from(["keep", "delete", "to_notes", "to_block", "copy", "rewrite"])


@hsettings(max_examples=150, deadline=None)
@given(st.lists(_ACTIONS, min_size=3, max_size=3), st.booleans())
def test_settle_outcome_follows_what_was_done_to_each_line(actions: list[str],
                                                           evidence_kept: bool) -> None:
    base = _unsure_doc()
    edited = base
    notes_extra: list[str] = []
    block_extra: list[str] = []
    expected_promoted: list[SettledFacet] = []
    expected_removed: list[SettledFacet] = []
    for row, settled, action in zip(ROWS.values(), (LANGUAGE, ROLE, EDITOR), actions,
                                    strict=True):
        moved = row if evidence_kept else row.split(" \u2014 ")[0]
        if action in ("delete", "to_notes", "to_block", "rewrite"):
            edited = _without(edited, row)
        if action == "delete":
            expected_removed.append(settled)
        elif action in ("to_notes", "to_block"):
            (notes_extra if action == "to_notes" else block_extra).append(moved)
            expected_promoted.append(settled)
        elif action == "copy":
            notes_extra.append(moved)
        elif action == "rewrite":
            notes_extra.append(f"- **{settled.facet_class}/{settled.key}**: something else")
    edited = edited.replace("My notes.", "\n".join(["My notes.", *notes_extra]))
    edited = edited.replace("- **lang**: rust\n", "\n".join(["- **lang**: rust", *block_extra])
                            + "\n")
    settled = settle(base, edited, UNSURE)
    order = list(ROWS)
    assert sorted(settled.promoted, key=lambda f: order.index(f.key)) == expected_promoted
    assert sorted(settled.removed, key=lambda f: order.index(f.key)) == expected_removed
    merged = apply_edit(base, edited, settled.lines)
    # a rewritten line was taken out of the block and settled nothing: that edit is ignored
    assert merged.ignored == ((NOT_YET_SURE,) if "rewrite" in actions else ())
    for line in notes_extra:  # whatever was put in the notes stays there
        assert line in merged.text


# -- properties --------------------------------------------------------------------------------

_TEXT_LINE = st.one_of(
    st.sampled_from([
        "# User Profile", "# Heading", "## Style", "- item", "* star", "1. first", "> quote",
        "| a | b |", "**bold** _em_ `code`", "", "   ", "\tindented", "unicode ✓ — ünïcödé",
        "<!-- a plain comment -->", "<!--habitus:style:start-->",
        "<!-- habitus:style:start --> trailing words", "<!-- HABITUS:goals:end -->",
        "<!-- habitus:custom:start -->", "<!-- habitus:custom:end -->", PLACEHOLDER,
        "- **verbosity**: chatty", "text with trailing spaces  ",
    ]),
    st.text(st.characters(exclude_characters="\n\r`~", exclude_categories=["Cs"]),
            max_size=20),
)
_FENCED = st.builds(
    lambda fence, prefix, indent, info, inner: (
        f"{prefix}{fence}{info}\n" + "".join(f"{indent}{line}\n" for line in inner)
        + f"{indent}{fence}"),
    st.sampled_from(["```", "~~~", "````"]),
    st.sampled_from(["", "- ", "> "]),
    st.sampled_from(["", "  "]),
    st.sampled_from(["", "markdown", " html"]),
    st.lists(st.sampled_from([start_marker("style"), end_marker("style"), "inside code",
                              start_marker("connected-accounts"), end_marker("goals"), ""]),
             min_size=1, max_size=4),
)
_OLD_BODY = st.sampled_from(["## Old\n\n- **stale**: row\n", "edited by hand\n", "\n", "x"])
_FACET = st.builds(
    lambda cls, key, value, stability, pinned: facet(cls, key, value, stability, pinned),
    st.sampled_from(["style", "identity", "tooling", "veto", "goal", "channel", "other"]),
    st.sampled_from(["verbosity", "name", "lang", "tool", "g"]),
    st.text(max_size=12),
    st.floats(0, 1),
    st.booleans(),
)
_BODIES = st.one_of(
    st.lists(_FACET, max_size=8).map(facet_bodies),
    st.lists(st.builds(Account, st.sampled_from(["gmail", "slack"]), st.text(max_size=8)),
             max_size=3).map(lambda accounts: {"connected-accounts": accounts_body(accounts)}),
    st.tuples(st.lists(_FACET, max_size=4), st.lists(st.builds(Account, st.just("notion"),
                                                               st.just("")), max_size=1))
    .map(lambda pair: {**facet_bodies(pair[0]), "connected-accounts": accounts_body(pair[1])}),
)


@st.composite
def documents(draw: st.DrawFn) -> tuple[str, list[str]]:
    """A document of user segments and managed noise; returns it and its user segments."""
    pieces: list[str] = []
    segments: list[str] = []
    last_marker: tuple[str, str] | None = None
    for _ in range(draw(st.integers(0, 12))):
        kind = draw(st.sampled_from(["user", "user", "fence", "block", "start", "end"]))
        name = draw(st.sampled_from(BLOCK_ORDER))
        pad = draw(st.sampled_from(["", " ", "  \t"]))
        if kind in ("user", "fence"):
            lines = draw(st.lists(_TEXT_LINE, max_size=4))
            if kind == "fence":
                lines.append(draw(_FENCED))
            lines.insert(draw(st.integers(0, len(lines))), f"(user segment {len(segments)})")
            segment = "\n".join(lines).strip("\r\n")
            segments.append(segment)
            pieces.append(segment)
        elif kind == "block":
            pieces.append(block(name, draw(_OLD_BODY)))  # a repeated name makes a duplicate
            last_marker = None
        elif kind == "start":
            pieces.append(pad + start_marker(name) + pad)
            last_marker = ("start", name)
        else:
            if last_marker == ("start", name):  # that would be a well-formed (empty) block
                name = BLOCK_ORDER[(BLOCK_ORDER.index(name) + 1) % len(BLOCK_ORDER)]
            pieces.append(pad + end_marker(name) + pad)
            last_marker = ("end", name)
    text = ""
    for piece in pieces:
        text += piece + draw(st.sampled_from(["\n", "\n\n", "\n\n\n"]))
    if draw(st.booleans()):
        text = text.rstrip("\n")
    if draw(st.booleans()):
        text = TITLE + "\n" + text
    return text, segments


def assert_in_order(text: str, segments: Sequence[str]) -> None:
    at = 0
    for segment in segments:
        found = text.find(segment, at)
        assert found >= 0, f"lost user text {segment!r}"
        at = found + len(segment)


@hsettings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents(), st.lists(_BODIES, min_size=1, max_size=3))
def test_user_text_survives_random_rerenders(doc: tuple[str, list[str]],
                                             renders: list[dict[str, str]]) -> None:
    text, segments = doc
    for bodies in renders:
        result = render(text, bodies)
        assert_in_order(result.text, segments)
        for name, body in bodies.items():
            assert result.text.count(block(name, body.rstrip("\n") + "\n")) == 1
        again = render(result.text, bodies)
        assert again.text == result.text
        assert again.changed == () and again.repairs == ()
        text = result.text
    assert render(text, {}).text == text
    # notes() may drop a leading title line and trims the edges, so follow the unique lines.
    assert_in_order(notes(text), [f"(user segment {n})" for n in range(len(segments))])


@hsettings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents(), _BODIES)
def test_apply_edit_never_loses_user_text(doc: tuple[str, list[str]],
                                          bodies: dict[str, str]) -> None:
    current = render(None, {**facet_bodies(FACETS), **bodies}).text
    edited, segments = doc
    result = apply_edit(current, edited)
    assert_in_order(result.text, segments)
    for name in BLOCK_ORDER:
        marker_count = result.text.count(start_marker(name) + "\n## ")
        assert marker_count == (1 if start_marker(name) in current else 0)
    settled = apply_edit(current, result.text)
    assert settled.text == result.text and settled.ignored == ()
    assert render(result.text, {}).repairs == ()


@hsettings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents())
def test_settle_any_saved_document_settles_each_shown_facet_at_most_once(
        doc: tuple[str, list[str]]) -> None:
    current = render(None, full_bodies()).text
    edited, _ = doc
    settled = settle(current, edited, UNSURE)
    shown = {LANGUAGE, ROLE, EDITOR}
    assert set(settled.promoted) <= shown and set(settled.removed) <= shown
    assert not set(settled.promoted) & set(settled.removed)
    assert len(settled.promoted) + len(settled.removed) == len(
        {*settled.promoted, *settled.removed})
    if settled.promoted or settled.removed:  # only ever through a well-formed block
        assert edited.count(start_marker(NOT_YET_SURE)) >= 1
