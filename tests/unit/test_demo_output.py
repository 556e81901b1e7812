"""What the demo prints of the data is the data: bracketed text (a rule's `[critical]`
priority in PROFILE.md, a facet value, a story) is shown, not taken for Rich markup; the
`--keep` lines can be copied whole; and a projection whose service has not started yet is not
counted as caught up."""

from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from habitus.demo.progress import Lag
from habitus.demo.scenario import build_scenario
from habitus.demo.show import next_steps, show_user


def console() -> tuple[Console, io.StringIO]:
    buffer = io.StringIO()
    return Console(file=buffer, width=100, force_terminal=False, color_system=None), buffer


def test_bracketed_data_is_printed_as_it_is() -> None:
    out, buffer = console()
    tenant = SimpleNamespace(tenant_id="acme")
    user = SimpleNamespace(user_id="sam", name="Sam [the terse]", persona="[bold]engineer",
                           story="Says [red]no[/red] to preambles.", sample_request=None)
    got = {
        "facets": [{"class": "style", "key": "format", "value": "[code-only]",
                    "state": "active", "stability": 0.9, "pinned": False,
                    "origin": "learned"}],
        "profile": "## Rules\n- **[critical]** Don't run migrations against production.\n",
        "explain": None,
        "rules": [{"tool_name": "bash", "priority": "[critical]",
                   "rule": "Never [rm -rf /].", "tags": ["[user-edict]"]}],
        "habits": [], "context": None, "route_stats": {"routes": []},
    }
    show_user(out, tenant, user, got)
    text = buffer.getvalue()
    for shown in ("Sam [the terse]", "[bold]engineer", "Says [red]no[/red] to preambles.",
                  "[code-only]", "- **[critical]** Don't run migrations", "Never [rm -rf /].",
                  "[user-edict]"):
        assert shown in text, shown


def test_the_keep_lines_point_at_the_sandbox_and_are_not_wrapped(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HABITUS_DATABASE_URL", "postgresql://me@127.0.0.1:2/mine")
    monkeypatch.delenv("HABITUS_NATS_URL", raising=False)
    monkeypatch.delenv("HABITUS_REDIS_URL", raising=False)
    out, buffer = console()
    sandbox = Path("/tmp/habitus-demo-" + "x" * 120)  # longer than the console is wide
    next_steps(out, "http://127.0.0.1:40123", {"acme": "hab_a", "globex": "hab_g"},
               build_scenario(0.0), sandbox)
    lines = buffer.getvalue().splitlines()
    assert "  export HABITUS_URL=http://127.0.0.1:40123" in lines
    assert any(line.startswith(f"  export HABITUS_DATA_DIR={sandbox}   #") for line in lines)
    assert "  export HABITUS_API_KEY=hab_a   # tenant acme" in lines
    assert any(line.startswith("  unset HABITUS_DATABASE_URL   #") for line in lines)
    assert any('-H "Authorization: Bearer $HABITUS_API_KEY"' in line for line in lines)


@pytest.mark.parametrize(("last_seq", "pending", "caught_up"), [
    (10, 0, True),
    (10, 3, False),
    (10, None, False),  # events wait, and the service has no consumer yet
    (0, None, True),    # nothing for it to read
])
def test_a_projection_is_caught_up_only_when_nothing_waits_for_it(
        last_seq: int, pending: int | None, caught_up: bool) -> None:
    lag = Lag("producers.candidates", "HABITUS_INGEST", last_seq, None, pending)
    assert lag.caught_up is caught_up
