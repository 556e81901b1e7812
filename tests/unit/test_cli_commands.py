"""The `habitus` command as a whole, without servers: one flag vocabulary across every command,
`--json` on every read, the help's order and the services `serve` names, and output that is
literal and whole (a rule's `[critical]` survives; nothing is cut to 80 columns in a pipe).

Gateway commands run against a fake gateway (the CLI's HTTP client on httpx's mock transport),
so what is asserted is what the command sends and prints; test_cli_operator.py runs them
against real services.
"""

from __future__ import annotations

import datetime
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer
from typer.testing import CliRunner, Result

from habitus.cli import app, keys, serve
from habitus.cli import gateway as cli_gateway
from habitus.cli.context import context_lines, context_params, tool_list
from habitus.cli.facets import facet_ref
from habitus.cli.output import WIDE, CliConsole
from habitus.config import get_settings

RUNNER = CliRunner()

#: every command that talks to the gateway; each takes --url, --key and --tenant
GATEWAY_COMMANDS = {
    "context", "route",
    "facets list", "facets explain", "facets pin", "facets unpin", "facets forget",
    "profile show",
    "habits list", "habits review", "habits approve", "habits reject",
    "rules list", "rules put", "rules delete",
    "traces stats", "traces search",
    "extractor status", "extractor quarantine", "extractor reextract",
    "optimize run", "optimize status", "optimize runs", "optimize frontier", "optimize apply",
    "optimize undo", "optimize stop", "optimize export", "optimize configuration",
    "optimize set",
}
#: every command that reads and prints something; each takes --json
READ_COMMANDS = {
    "context", "route", "facets list", "facets explain", "profile show", "habits list",
    "habits review", "rules list", "traces stats", "traces search", "extractor status",
    "extractor quarantine", "events tail", "lag", "dlq list", "keys list",
    "optimize status", "optimize runs", "optimize frontier", "optimize configuration",
}
#: the one spelling of each shared flag, by the parameter's name
VOCABULARY = {"url": "--url", "key": "--key", "tenant": "--tenant", "user": "--user",
              "as_json": "--json"}


def leaves(command: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """(`facets list`, its click command) for every runnable command under `command`."""
    subcommands = getattr(command, "commands", None)
    if not subcommands:
        yield path, command
        return
    for name, sub in subcommands.items():
        yield from leaves(sub, f"{path} {name}".strip())


COMMANDS = dict(leaves(typer.main.get_command(app)))


def options(command: Any) -> dict[str, Any]:
    """The command's visible options by parameter name."""
    return {p.name: p for p in command.params
            if getattr(p, "opts", None) and p.opts[0].startswith("--")
            and not getattr(p, "hidden", False)}


def test_the_tree_is_the_one_these_tests_know() -> None:
    assert GATEWAY_COMMANDS <= set(COMMANDS) and READ_COMMANDS <= set(COMMANDS)


@pytest.mark.parametrize("path", sorted(COMMANDS))
def test_every_shared_flag_has_one_spelling(path: str) -> None:
    for name, param in options(COMMANDS[path]).items():
        spelling = VOCABULARY.get(name)
        if spelling is not None:
            assert param.opts == [spelling] and not param.secondary_opts, (path, param.opts)
        for flag in param.opts:
            assert flag not in ("--api-key", "--user-id", "--tenant-id", "--gateway",
                                "--gateway-url", "--as-json"), (path, flag)
            assert flag != "--key" or name == "key", f"{path}: --key must be the API key"


@pytest.mark.parametrize("path", sorted(COMMANDS))
def test_gateway_commands_take_url_key_and_tenant(path: str) -> None:
    names = set(options(COMMANDS[path]))
    if path in GATEWAY_COMMANDS:
        assert {"url", "key", "tenant"} <= names, path
    else:
        assert not names & {"url", "key"}, f"{path} does not talk to the gateway"


@pytest.mark.parametrize("path", sorted(READ_COMMANDS))
def test_every_read_command_has_json(path: str) -> None:
    assert "as_json" in options(COMMANDS[path]), path


def test_the_help_starts_with_up_and_demo_and_context_leads_the_gateway_panel() -> None:
    names = list(typer.main.get_command(app).commands)  # type: ignore[attr-defined]
    assert names[:2] == ["up", "demo"]
    shown = RUNNER.invoke(app, ["--help"], env={"COLUMNS": "200"}).output
    assert shown.index(" up ") < shown.index(" demo ") < shown.index(" context ") \
        < shown.index(" facets ") < shown.index(" lag ")


def test_serve_help_lists_every_installed_service() -> None:
    from habitus.service import registry

    shown = RUNNER.invoke(app, ["serve", "--help"], env={"COLUMNS": "300"})
    assert shown.exit_code == 0, shown.output
    installed = [s.name for s in registry.services()]
    assert serve.SERVICES_GROUP == registry.GROUP
    assert installed and installed == serve.service_names()
    assert "Services: " + ", ".join(installed) + "." in " ".join(shown.output.split())


def test_an_unknown_service_is_refused_naming_the_installed_ones() -> None:
    refused = RUNNER.invoke(app, ["serve", "no_such_service"])
    assert refused.exit_code == 2
    assert "unknown service 'no_such_service'" in refused.output
    assert all(name in refused.output for name in serve.service_names())


def test_a_role_must_be_one_of_three_and_the_settings_agree() -> None:
    from habitus.config import Settings

    refused = RUNNER.invoke(app, ["serve", "profile_renderer", "--role", "reads"],
                            env={"COLUMNS": "200"})
    assert refused.exit_code == 2
    assert "'reads' is not one of 'all', 'rpc', 'projections'" in refused.output, \
        refused.output
    pattern = Settings.model_fields["role"].metadata[0].pattern
    assert pattern == "^(" + "|".join(serve.ROLES) + ")$"


# --------------------------------------------------------------------------- a fake gateway


class FakeGateway:
    """Answers `POST /v1/rpc/<method>` from `answers` (a method without one: 503), recording
    each request: the transport of the CLI's HTTP client (httpx's own mock transport), so the
    command's request is built and sent exactly as it would be to a real gateway."""

    def __init__(self, answers: dict[str, Any]):
        self.answers = answers
        self.sent: list[tuple[str, dict[str, Any], httpx.Headers]] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        method = request.url.path.rsplit("/", 1)[1]
        self.sent.append((method, json.loads(request.content), request.headers))
        if method not in self.answers:
            body: dict[str, Any] = {"error": {"code": "unavailable", "message": "down"}}
            return httpx.Response(503, content=_dumps(body))
        return httpx.Response(200, content=_dumps({"result": self.answers[method]}))

    def params(self, method: str) -> dict[str, Any]:
        return next(p for m, p, _ in self.sent if m == method)


def _dumps(value: Any) -> bytes:
    return json.dumps(value).encode()


@pytest.fixture
def gateway(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeGateway]:
    for name in ("HABITUS_URL", "HABITUS_GATEWAY_URL", "HABITUS_API_KEY", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HABITUS_DATA_DIR", str(tmp_path))
    get_settings.cache_clear()
    fake = FakeGateway({})
    client = httpx.Client(transport=httpx.MockTransport(fake.handle))
    monkeypatch.setattr(cli_gateway, "http", lambda: client)
    yield fake
    get_settings.cache_clear()


def run(*args: str) -> Result:
    """`habitus <args>` against the fake gateway, its output captured (not a terminal)."""
    return RUNNER.invoke(app, [*args, "--url", "http://gw", "--key", "hab_k"],
                         catch_exceptions=False)


def ok(result: Result) -> str:
    assert result.exit_code == 0, result.output
    return result.output


def _facet(**changes: Any) -> dict[str, Any]:
    return {"class": "style", "key": "verbosity", "value": "terse", "state": "active",
            "user_state": "auto", "stability": 0.91, "pinned": False, "origin": "stated",
            "evidence_count": 3, "cue_counts": {}, "last_evidence_at": 1_764_547_200.0,
            **changes}


RULE = {"id": "r1", "tool_name": "send_email", "priority": "critical", "scope": "user",
        "source": "api", "rule": "Never email Sarah [the ex-client]."}
CONTEXT = {"user_id": "alice", "version": 2, "steered_by": ["When: I ask for a review"],
           "sections": [{"name": "user_profile",
                         "content": "## User Profile (Learned)\n\n- **style/verbosity**: terse"},
                        {"name": "tool_rules",
                         "content": "## Tool-scoped rules\n\n### send_email\n\n"
                                    "- **[critical]** Never email Sarah."}],
           "text": "## User Profile (Learned)\n..."}

#: a canned answer per read method, and the command that prints it
READS: list[tuple[tuple[str, ...], dict[str, Any], Any]] = [
    (("context", "--user", "alice"), {"prompt.context": CONTEXT}, CONTEXT),
    (("facets", "list", "--user", "alice"),
     {"learning.list_facets": {"facets": [_facet()], "pending_since": None}},
     {"facets": [_facet()], "pending_since": None}),
    (("profile", "show", "--user", "alice"),
     {"profile.get": {"user_id": "alice", "version": 1, "markdown": "# P\n", "sha256": "0" * 64}},
     {"user_id": "alice", "version": 1, "markdown": "# P\n", "sha256": "0" * 64}),
    (("habits", "list", "--user", "alice"), {"habits.list": {"habits": []}}, []),
    (("habits", "review", "--user", "alice"),
     {"habits.list_review": {"items": [], "pending_duplicates": 0}},
     {"items": [], "pending_duplicates": 0}),
    (("rules", "list", "--user", "alice"), {"memory.tool_rule_list": {"rules": [RULE]}},
     [RULE]),
    (("traces", "search", "x"), {"traces.search": {"traces": [{"trace_id": "t1"}]}},
     [{"trace_id": "t1"}]),
    (("extractor", "quarantine", "--user", "alice"),
     {"extraction.quarantine": {"items": [{"reason": "r"}]}}, [{"reason": "r"}]),
    (("route", "hi", "--models", "a"),
     {"router.select_model": {"model": "a", "policy": "heuristic", "query_class": "short",
                              "reason": "the first available model", "decision_id": "d1"}},
     {"model": "a", "policy": "heuristic", "query_class": "short",
      "reason": "the first available model", "decision_id": "d1"}),
]


@pytest.mark.parametrize(("args", "answers", "printed"), READS,
                         ids=[" ".join(a[:2]) for a, _, _ in READS])
def test_json_prints_the_answer_as_it_came(gateway: FakeGateway, args: tuple[str, ...],
                                           answers: dict[str, Any], printed: Any) -> None:
    gateway.answers.update(answers)
    assert json.loads(ok(run(*args, "--json"))) == printed


def test_the_old_api_key_spelling_is_still_the_key(gateway: FakeGateway) -> None:
    gateway.answers["learning.list_facets"] = {"facets": [], "pending_since": None}
    ok(RUNNER.invoke(app, ["facets", "list", "--user", "u", "--url", "http://gw",
                           "--api-key", "hab_old"]))
    ok(RUNNER.invoke(app, ["facets", "list", "--user", "u", "--url", "http://gw",
                           "--api-key=hab_eq"]))
    assert [h["Authorization"] for _, _, h in gateway.sent] == ["Bearer hab_old",
                                                                 "Bearer hab_eq"]


def test_tenant_is_sent_for_an_admin_key(gateway: FakeGateway) -> None:
    gateway.answers["memory.tool_rule_list"] = {"rules": []}
    ok(run("rules", "list", "--tenant", "acme"))
    ok(run("rules", "list"))
    first, second = (h for _, _, h in gateway.sent)
    assert first["X-Habitus-Tenant"] == "acme" and "X-Habitus-Tenant" not in second


def test_facets_are_named_class_slash_key(gateway: FakeGateway) -> None:
    assert facet_ref("style/verbosity") == ("style", "verbosity")
    assert facet_ref("tooling/ci/cd") == ("tooling", "ci/cd")
    gateway.answers["learning.pin_facet"] = _facet(user_state="pinned")
    assert "style/verbosity = terse (active, pinned)" in ok(
        run("facets", "pin", "--user", "u", "style/verbosity"))
    assert gateway.params("learning.pin_facet") == {"user_id": "u", "class": "style",
                                                    "key": "verbosity"}
    for bad in ("verbosity", "style/", "/verbosity"):
        refused = run("facets", "pin", "--user", "u", bad)
        assert refused.exit_code == 2 and "CLASS/KEY" in refused.output
    old = run("facets", "explain", "--user", "u", "--class", "style")
    assert old.exit_code == 2 and "style/verbosity" in old.output and "--key" in old.output


# --------------------------------------------------------------------------- context


def test_context_params_send_only_what_was_given() -> None:
    assert tool_list(None) is None and tool_list("") == []
    assert tool_list(" send_email, ,calendar ") == ["send_email", "calendar"]
    assert context_params("u") == {"user_id": "u"}
    assert context_params("u", "a,b", "do it", ["before"], 500, True) == {
        "user_id": "u", "tools": ["a", "b"], "request": "do it", "context": ["before"],
        "budget_chars": 500, "unconfirmed": True}
    assert context_params("u", tools="")["tools"] == []


def test_context_prints_each_section_literally(gateway: FakeGateway) -> None:
    gateway.answers["prompt.context"] = CONTEXT
    shown = ok(run("context", "--user", "alice", "--tools", "send_email", "--request",
                   "review this", "--unconfirmed"))
    assert gateway.params("prompt.context") == {"user_id": "alice", "tools": ["send_email"],
                                                "request": "review this", "unconfirmed": True}
    assert "-- user_profile --\n## User Profile (Learned)\n\n- **style/verbosity**: terse\n" \
        in shown
    assert "- **[critical]** Never email Sarah." in shown
    assert "steered by habit: When: I ask for a review" in shown
    empty = {**CONTEXT, "sections": [], "text": "", "steered_by": []}
    assert "nothing for this user yet" in context_lines(empty)[1].plain


# --------------------------------------------------------------------------- literal, whole


def test_a_rules_priority_and_bracketed_text_print_literally(gateway: FakeGateway) -> None:
    gateway.answers["memory.tool_rule_list"] = {"rules": [RULE]}
    shown = ok(run("rules", "list", "--user", "alice"))
    assert "[critical]" in shown and "Never email Sarah [the ex-client]." in shown


def test_a_long_value_is_whole_when_the_output_is_not_a_terminal(gateway: FakeGateway
                                                                 ) -> None:
    value = "a-very-long-value-" + "x" * 300 + "-end"
    gateway.answers["learning.list_facets"] = {"facets": [_facet(value=value)],
                                               "pending_since": None}
    shown = ok(run("facets", "list", "--user", "alice"))
    assert value in shown and "…" not in shown
    assert max(len(line) for line in shown.splitlines()) > 300


def test_the_console_is_wide_only_off_a_terminal() -> None:
    piped = CliConsole(file=io.StringIO())
    assert not piped.is_terminal and piped.width == WIDE
    piped.width = 60
    assert piped.width == 60  # an explicit width still wins
    terminal = CliConsole(file=io.StringIO(), force_terminal=True)
    assert terminal.is_terminal and terminal.width < WIDE  # the terminal's own width


# --------------------------------------------------------------------------- empty answers


NO_LLM = {"habits": [], "proposals_off": "HABITUS_LLM_BASE_URL is unset"}


def test_no_habits_without_an_llm_says_why_and_how_to_configure_one(gateway: FakeGateway
                                                                    ) -> None:
    # the habits service's own answer says it cannot propose
    gateway.answers.update({"habits.list": NO_LLM,
                            "habits.list_review": {"items": [], "pending_duplicates": 0}})
    for args in (("habits", "list", "--user", "alice"), ("habits", "review", "--user", "alice")):
        shown = " ".join(ok(run(*args)).split())
        assert "nothing can be proposed without an LLM (HABITUS_LLM_BASE_URL is unset)" in \
            shown, shown
        assert "HABITUS_LLM_BASE_URL" in shown and "HABITUS_LLM_MODEL" in shown


def test_no_habits_with_an_llm_is_just_that(gateway: FakeGateway) -> None:
    gateway.answers["habits.list"] = {"habits": [], "proposals_off": None}
    assert ok(run("habits", "list", "--user", "alice")).strip() == "no habits for alice"
    assert ok(run("habits", "list", "--user", "alice", "--status", "active")).strip() == \
        "no active habits for alice"
    gateway.answers["habits.list_review"] = {"items": [], "pending_duplicates": 0}
    assert ok(run("habits", "review", "--user", "alice")).strip() == \
        "nothing to review for alice"


def test_no_traces_yet_says_so(gateway: FakeGateway) -> None:
    gateway.answers.update({
        "traces.summary": {"traces": 0, "success_rate": 0.0, "avg_feedback": None},
        "traces.route_stats": {"routes": []}, "traces.search": {"traces": []}})
    assert ok(run("traces", "stats")).strip() == "no traces recorded yet for this tenant"
    assert ok(run("traces", "stats", "--user", "bo")).strip() == "no traces recorded yet for bo"
    assert ok(run("traces", "search", "x")).strip() == "no traces recorded yet for this tenant"
    gateway.answers["traces.summary"] = {"traces": 4, "success_rate": 1.0, "avg_feedback": None}
    assert ok(run("traces", "search", "rate limit")).strip() == "no trace matches 'rate limit'"


def test_no_facets_and_no_rules_say_so(gateway: FakeGateway) -> None:
    gateway.answers.update({"learning.list_facets": {"facets": [], "pending_since": None},
                            "memory.tool_rule_list": {"rules": []}})
    assert "no facets for alice: nothing stated, learned or set" in ok(
        run("facets", "list", "--user", "alice"))
    assert ok(run("facets", "list", "--user", "alice", "--class", "goal")).startswith(
        "no goal facets for alice")
    assert ok(run("rules", "list", "--user", "alice", "--tool", "send_email")).strip() == \
        "no rules for send_email of alice or the tenant"


def test_keys_list_json_has_times_as_iso(monkeypatch: pytest.MonkeyPatch) -> None:
    at = datetime.datetime(2026, 1, 2, 3, 4, tzinfo=datetime.UTC)
    rows = [{"key_prefix": "hab_1a2b", "tenant_id": "acme", "is_admin": False, "role": "agent",
             "label": "[ci]", "created_at": at, "revoked_at": None}]
    monkeypatch.setattr(keys, "_with_pool", lambda fn: rows)
    listed = json.loads(ok(RUNNER.invoke(app, ["keys", "list", "--json"])))
    assert listed == [{**rows[0], "created_at": "2026-01-02T03:04:00+00:00"}]
    assert "[ci]" in ok(RUNNER.invoke(app, ["keys", "list"]))
