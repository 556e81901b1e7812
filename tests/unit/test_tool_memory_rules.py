"""Tool memory's pure parts beside capture: the v1 -> v2 rule event, the ids an API put shares
with capture, the parameters' checks, lexical recall, and a user's rules sealed at rest (and
recall's cache keyed by the sealed rule)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from habitus.contract import memory
from habitus.crypto import DirectoryKeyStore, Keyring, load_kek_ring
from habitus.crypto.columns import COLUMNS
from habitus.events import CATALOG
from habitus.events.domain import RuleScope, RuleSource
from habitus.events.ingest import ToolCall, TurnRecorded
from services.tool_memory import store
from services.tool_memory.capture import capture
from services.tool_memory.recall import Recaller, lexical_scores
from services.tool_memory.rpc import rule_id_for
from services.tool_memory.store import RuleRow


def v1_rule(**payload: Any) -> dict[str, Any]:
    return {"event_id": "0190d7a8-0000-7000-8000-000000000001", "type": "ToolRuleUpserted",
            "schema_version": 1, "tenant_id": "acme", "user_id": "dana", "occurred_at": 5.0,
            "producer": "old", "payload": {"rule_id": "r1", "tool_name": "send_email",
                                           "rule": "Never email Sarah.", **payload}}


@pytest.mark.parametrize(("source", "upcast"), [
    ("user", RuleSource.USER_EXPLICIT), (None, RuleSource.USER_EXPLICIT),
    ("tests", RuleSource.PROGRAMMATIC)])
def test_a_version_1_rule_reads_as_version_2(source: str | None, upcast: RuleSource) -> None:
    body = v1_rule(**({"source": source} if source else {}))
    event = CATALOG.decode(body)
    assert event.schema_version == 2
    assert event.payload.source == upcast
    assert event.payload.scope == RuleScope.USER
    assert event.payload.created_at is None and event.payload.updated_at is None


def test_an_api_put_of_what_the_user_said_is_the_captured_rule() -> None:
    turn = TurnRecorded(session_id="s", turn_id="t", channel="chat",
                        user_message="Never email Sarah at sarah@example.com.",
                        assistant_message="ok", user_at=1.0, assistant_at=2.0,
                        tool_calls=[ToolCall(tool_name="send_email", ok=True)])
    [captured] = capture("acme", "dana", turn)
    assert rule_id_for("acme", "dana", "send_email",
                       "never email sarah at SARAH@example.com") == captured.rule_id
    assert rule_id_for("acme", "lee", "send_email", captured.rule) != captured.rule_id


@pytest.mark.parametrize(("params", "field"), [
    ({"tool_name": "", "rule": "x", "user_id": "u"}, "tool_name"),
    ({"tool_name": "shell", "rule": " \n ", "user_id": "u"}, "rule"),
    ({"tool_name": "shell", "rule": "x" * 4001, "user_id": "u"}, "rule"),
    ({"tool_name": "shell", "rule": "x", "user_id": "u", "priority": "low"}, "priority"),
    ({"tool_name": "shell", "rule": "x", "user_id": "u", "source": "user"}, "source"),
    ({"tool_name": "shell", "rule": "x", "user_id": "u", "scope": "world"}, "scope"),
    ({"tool_name": "shell", "rule": "x"}, "user_id"),
    ({"tool_name": "shell", "rule": "x", "user_id": "u", "scope": "tenant"}, "user_id"),
    ({"tool_name": "shell", "rule": "x", "user_id": "_tenant"}, "user_id"),
])
def test_a_bad_put_names_its_field(params: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        memory.RulePut.model_validate(params)
    assert field in str(caught.value)


def test_tool_names_are_trimmed_and_lower_case() -> None:
    put = memory.RulePut(tool_name="  Send_Email ", rule=" Never email Sarah. ", user_id="u")
    assert (put.tool_name, put.rule) == ("send_email", "Never email Sarah.")
    assert memory.RulePut(tool_name="*", rule="x", scope="tenant").user_id is None


def test_lexical_recall_scores_what_the_rule_covers_of_the_query() -> None:
    rules = ["When a deploy is rate limited, wait a minute and retry.",
             "Tag releases with the ticket number.", "Use the staging cluster first."]
    scores = lexical_scores("the deploy was rate limited", rules)
    assert scores[0] > scores[2] >= scores[1]
    assert lexical_scores("", rules) == [0.0, 0.0, 0.0]


async def test_capture_turned_off_publishes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    from habitus.events import CATALOG
    from habitus.projection import ApplyContext, Delivered
    from services.tool_memory.projection import CaptureProjection
    from services.tool_memory.settings import ToolMemorySettings

    monkeypatch.setenv("HABITUS_TOOL_MEMORY_CAPTURE", "0")
    projection = CaptureProjection(ToolMemorySettings())
    assert projection.enabled is False
    turn = CATALOG.new(TurnRecorded(
        session_id="s", turn_id="t", channel="chat", user_message="Never email Sarah.",
        assistant_message="ok", user_at=1.0, assistant_at=2.0,
        tool_calls=[ToolCall(tool_name="send_email", ok=True)]),
        tenant_id="acme", user_id="dana", producer="tests")
    ctx = ApplyContext()
    await projection.apply_batch(None, [Delivered(turn, 1, "s", 1)], ctx)  # type: ignore[arg-type]
    assert ctx.emitted == []
    monkeypatch.setenv("HABITUS_TOOL_MEMORY_CAPTURE", "1")
    assert CaptureProjection(ToolMemorySettings()).enabled is True


def test_recall_forgets_the_texts_of_erased_rules() -> None:
    recaller = Recaller(semantic=False)
    recaller._vectors["Never email Sarah."] = object()
    recaller._vectors["Tag releases."] = object()
    recaller.forget(["Never email Sarah.", "not cached"])
    assert list(recaller._vectors) == ["Tag releases."]


# ------------------------------------------------------------------ sealed at rest

@pytest.fixture
def sealing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Keyring:
    """The process's column sealer with a keyring of its own (restored after the test)."""
    ring = Keyring(load_kek_ring(None, tmp_path / "kek.json"), DirectoryKeyStore(tmp_path / "k"))
    monkeypatch.setattr(COLUMNS, "keyring", ring)
    return ring


def stored_rule(user_id: str, rule: str, tags: tuple[str, ...]) -> RuleRow:
    return RuleRow("acme", user_id, "r1", "send_email", rule, "critical", "user_explicit",
                   tags, "user", 1.0, 2.0, "turn:s/t")


def test_a_users_rule_and_tags_are_sealed_on_the_way_in_and_opened_on_the_way_out(
        sealing: Keyring) -> None:
    row = stored_rule("dana", "Never email Sarah at sarah@example.com.", ("sarah", "vip"))
    params = store._sealed(row)
    assert params[4].startswith("hc1:") and "sarah" not in params[4].lower()
    assert all(tag.startswith("hc1:") for tag in params[7])
    assert store._sealed(row) == params  # deterministic: the same rule is the same value
    back = store._row(params)
    assert (back.rule, back.tags) == (row.rule, row.tags)
    assert back.stored_rule == params[4] and back.recall_key == params[4]
    tenant = store._sealed(stored_rule("_tenant", "Never run rm -rf.", ("safety",)))
    assert (tenant[4], tenant[7]) == ("Never run rm -rf.", ["safety"])  # the tenant's own


def test_an_erased_users_rule_opens_no_more(sealing: Keyring) -> None:
    from habitus.crypto import Shredded

    params = store._sealed(stored_rule("dana", "Never email Sarah.", ()))
    sealing.destroy("acme", "dana")
    with pytest.raises(Shredded):
        store._row(params)


async def test_recall_keys_embeddings_by_the_stored_rule_so_erasure_can_drop_them() -> None:
    class Model:
        def __init__(self) -> None:
            self.encoded: list[str] = []

        def encode(self, texts: list[str]) -> list[Any]:
            self.encoded += texts
            return [np.array([1.0, float(len(t))]) / np.hypot(1.0, len(t)) for t in texts]

    recaller = Recaller(semantic=True)
    model = Model()
    recaller._model = model
    texts = ["Never email Sarah.", "Tag releases."]
    keys = ["hc1:sealed-a", "hc1:sealed-b"]
    first = await recaller.scores("email", texts, keys)
    assert await recaller.scores("email", texts, keys) == first
    assert set(recaller._vectors) == set(keys)  # no person's text is a key
    assert model.encoded.count("Never email Sarah.") == 1  # embedded once, then cached
    recaller.forget(["hc1:sealed-a"])  # what erasure knows once the key is gone
    assert list(recaller._vectors) == ["hc1:sealed-b"]
