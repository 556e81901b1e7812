"""Tool memory, capture (services/tool_memory/capture.py).

The issue's vectors, plus the anchor's defects we must not repeat (section 2 of the openhuman
reference): a split on every "." that cuts e-mail addresses, an ASCII-only apostrophe that
misses a typographic "Don't", and no dedupe, so a repeated edict piled up copies of one rule.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from habitus.events.ingest import ToolCall, TurnRecorded
from habitus.ids import derived_event_id
from services.tool_memory.capture import (
    MAX_BODY_CHARS,
    CapturedRule,
    capture,
    choose_tool,
    edicts,
    normalise_body,
    normalise_tool,
    sentences,
)

TENANT = "acme"
USER = "u1"


def _turn(
    message: str,
    tools: Sequence[str | tuple[str, bool] | tuple[str, bool, str | None]] = (),
    *,
    turn_id: str = "t1",
) -> TurnRecorded:
    """A turn whose user wrote `message` and whose assistant called `tools` in order (a bare
    name is a successful call; (name, ok) or (name, ok, output_summary) say more)."""
    calls = []
    for spec in tools:
        if isinstance(spec, str):
            calls.append(ToolCall(tool_name=spec, ok=True))
        else:
            name, ok, *rest = spec
            calls.append(ToolCall(tool_name=name, ok=ok, output_summary=rest[0] if rest else None))
    return TurnRecorded(
        session_id="s1",
        turn_id=turn_id,
        channel="chat",
        user_message=message,
        assistant_message="Done.",
        user_at=1_700_000_000.0,
        assistant_at=1_700_000_002.0,
        tool_calls=calls,
    )


def _rules(message: str, tools: Sequence[str] = ()) -> list[CapturedRule]:
    return capture(TENANT, USER, _turn(message, tools))


def _edict_rule(rule: CapturedRule, tool: str) -> None:
    assert rule.tool_name == tool
    assert rule.priority == "critical"
    assert rule.source == "user_explicit"
    assert rule.tags == ("user-edict",)


# --------------------------------------------------------------------------- issue vectors


def test_never_email_sarah_keeps_the_address() -> None:
    [rule] = _rules("Never email Sarah at sarah@example.com.", ["send_email"])
    _edict_rule(rule, "send_email")
    assert "sarah@example.com" in rule.rule
    assert rule.rule == "Never email Sarah at sarah@example.com."  # its final period kept
    assert rule.rule_id == derived_event_id(
        "tool-rule", TENANT, USER, "send_email", "never email sarah at sarah@example.com"
    )


def test_two_edicts_go_to_the_tools_they_name() -> None:
    rules = _rules(
        "Don't run shell commands with sudo. Stop using browser for that.", ["shell", "browser"]
    )
    assert [(r.tool_name, r.rule) for r in rules] == [
        ("shell", "Don't run shell commands with sudo."),
        ("browser", "Stop using browser for that."),
    ]
    for rule in rules:
        _edict_rule(rule, rule.tool_name)


def test_terminal_is_the_bash_tool() -> None:
    [rule] = _rules("Please never use the terminal for deploys", ["calendar", "bash"])
    _edict_rule(rule, "bash")
    assert rule.rule == "Please never use the terminal for deploys"


def test_no_tool_called_means_every_tool() -> None:
    [rule] = _rules("Never do that.")
    _edict_rule(rule, "*")


def test_curly_apostrophe_counts() -> None:
    [rule] = _rules("Don\u2019t email Bob", ["send_email"])
    _edict_rule(rule, "send_email")
    assert rule.rule == "Don\u2019t email Bob"  # the body is as written


@pytest.mark.parametrize(
    "message",
    [
        "Send Sarah an update when you can.",
        "I want to stop working on this",
        "I don't know why it failed.",
    ],
)
def test_not_edicts(message: str) -> None:
    assert _rules(message, ["send_email", "shell"]) == []


def test_the_same_edict_in_a_later_turn_has_the_same_id() -> None:
    message = "Never email Sarah at sarah@example.com."
    first = capture(TENANT, USER, _turn(message, ["send_email"], turn_id="t1"))
    later = capture(TENANT, USER, _turn(message, ["send_email", "search"], turn_id="t9"))
    assert [r.rule_id for r in first] == [r.rule_id for r in later]
    assert len(first) == 1


def test_repeated_failure_is_one_normal_rule() -> None:
    turn = _turn(
        "deploy it",
        [("shell", False, "permission denied"), ("shell", False, "still denied"),
         ("shell", True)],
    )
    [rule] = capture(TENANT, USER, turn)
    assert rule.tool_name == "shell"
    assert rule.priority == "normal"
    assert rule.source == "post_turn"
    assert rule.tags == ("repeated-failure",)
    assert "failed 2 times" in rule.rule
    assert "permission denied" in rule.rule  # the first failure says why
    assert "still denied" not in rule.rule
    assert rule.rule_id == derived_event_id("tool-rule", TENANT, USER, "shell", "repeated-failure")


def test_one_failure_is_no_rule() -> None:
    assert capture(TENANT, USER, _turn("go", [("shell", False, "boom"), ("shell", True)])) == []


# --------------------------------------------------------------------------- edicts


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("never use sudo", ["never use sudo"]),
        ("NEVER EMAIL SARAH!", ["NEVER EMAIL SARAH!"]),
        ("do not  delete the staging database.", ["do not delete the staging database."]),
        ("dont push to main", ["dont push to main"]),
        ("Don\u2018t book flights on Fridays.", ["Don\u2018t book flights on Fridays."]),
        ("Ok, please never use the browser", ["Ok, please never use the browser"]),
        ("And also, just don't cc my boss.", ["And also, just don't cc my boss."]),
        ("From now on, never send invites before 9am.",
         ["From now on, never send invites before 9am."]),
        ("Stop being so chatty in Slack DMs.", ["Stop being so chatty in Slack DMs."]),
        ("You should never run migrations on prod.", ["You should never run migrations on prod."]),
        ("Don't you dare email Bob!", ["Don't you dare email Bob!"]),
        ("Never email Sarah, ok?", ["Never email Sarah, ok?"]),
        ("- never run rm -rf\n- don't touch prod", ["never run rm -rf", "don't touch prod"]),
        ("Thanks! Also never schedule meetings on Friday; never invite Tom.",
         ["Also never schedule meetings on Friday", "never invite Tom."]),
        # standing obligations (a new-user round: none of these made a rule)
        ("Always cc my manager on emails to clients.",
         ["Always cc my manager on emails to clients."]),
        ("Please always ask before spending money.", ["Please always ask before spending money."]),
        ("Make sure to always run the tests before committing.",
         ["Make sure to always run the tests before committing."]),
        # how to answer, but in a tool's output: that tool's rule
        ("Please never include tables in emails to clients.",
         ["Please never include tables in emails to clients."]),
        # an order after its condition, and an obligation naming a kind of tool (a new-user
        # round: neither made a rule)
        ("When you book hotels, always pick ones with free cancellation.",
         ["When you book hotels, always pick ones with free cancellation."]),
        ("Whenever you schedule a meeting, never book Fridays.",
         ["Whenever you schedule a meeting, never book Fridays."]),
        ("Always use my work email to send invoices.",
         ["Always use my work email to send invoices."]),
        # after a condition naming a kind of tool, an order without a verb of its own, and a
        # condition in the reader's other languages (none made a rule)
        ("When you schedule meetings, never before 10am.",
         ["When you schedule meetings, never before 10am."]),
        ("Wenn du Meetings planst, nie vor 10 Uhr.", ["Wenn du Meetings planst, nie vor 10 Uhr."]),
        ("Quand tu planifies des réunions, jamais avant 10h.",
         ["Quand tu planifies des réunions, jamais avant 10h."]),
        ("Cuando agendes reuniones, nunca antes de las 10.",
         ["Cuando agendes reuniones, nunca antes de las 10."]),
        ("Wenn du E-Mails an Kunden schreibst, immer auf Deutsch.",
         ["Wenn du E-Mails an Kunden schreibst, immer auf Deutsch."]),
        ("Quand tu envoies un mail à Paul, n'envoie jamais de pièce jointe.",
         ["Quand tu envoies un mail à Paul, n'envoie jamais de pièce jointe."]),
        # a third round: "make sure you never", "avoid" a kind of tool's work, reply-all
        ("Make sure you never delete files without asking.",
         ["Make sure you never delete files without asking."]),
        ("Avoid booking meetings before 9.", ["Avoid booking meetings before 9."]),
        ("Avoid sending emails on weekends.", ["Avoid sending emails on weekends."]),
        ("Never reply-all.", ["Never reply-all."]),
    ],
)
def test_edicts(message: str, expected: list[str]) -> None:
    assert edicts(message) == expected


@pytest.mark.parametrize(
    "message",
    [
        "you never listen",
        "Stop.",
        "Stop it!",
        "Stop everything.",
        "Never mind.",
        "nevermind, it works",
        "Don't worry about it.",
        "Don't think so.",
        "Never heard of it.",
        "Never used it before.",
        "Don't you think that's risky?",
        "Don't we have a shell tool?",
        "He said never email Sarah.",
        "The stop button doesn't work.",
        "I do not want that",
        "> never email Sarah\nthat was her message",
        "```\n# don't edit this file\n```",
        "Send \"never again\" as the subject.",
        "Always happy to help!",
        "Always the same problem with this printer.",
        "It always fails on Mondays.",
        "You always forget the attachment.",
        "I always use tabs.",
        "Thanks, always appreciated.",
        "Make sure you double-check the dates.",  # this task's, no standing rule
        "Is it always like this?",
        "Always answer in German.",  # a style facet, which the user can correct or forget
        "Never use emojis.",  # a veto the learning cache keeps ("emojis are fine" undoes it)
        "Don't use bullet points.",
        "Never answer in German.",
        "Stop apologizing.",
        "Always use tables for comparisons.",
        "Please always keep it short.",
        "When I ask a question, always answer in German.",  # a condition, then a style
        "If you can, always use tables.",
        "When you get a chance, don't forget the report.",
        "When I was young, never did I think this.",  # an inversion, no order
        "Quand tu as le temps, jamais de stress.",  # names no kind of tool
        "If you ask me, never again.",
        "When you book meetings, never?",
        # after a condition naming a kind of tool, what happens is no order
        "When I checked my email, never heard back.",
        "Whenever I open the browser, always the same page loads.",
        "When I email Sarah, never did I get a reply.",
        "Avoid using jargon.",  # a way of answering: the learning cache's
        "Avoid overthinking it.",
        "Never reply in German.",
        "",
        "   ",
    ],
)
def test_not_an_edict(message: str) -> None:
    assert edicts(message) == []


def test_a_long_edict_is_cut_on_a_word() -> None:
    message = "Never " + "send the quarterly report " * 20 + "to anyone."
    [body] = edicts(message)
    assert len(body) <= MAX_BODY_CHARS
    assert body.endswith("\u2026")
    assert body[:-1] == body[:-1].rstrip()
    assert message.startswith(body[:-1])
    assert message[len(body) - 1] == " "  # the cut is at a space, no word is cut


def test_a_body_is_one_line() -> None:
    [rule] = _rules("never run\u2028sudo", ["shell"])
    assert "\u2028" not in rule.rule


# --------------------------------------------------------------------------- sentences


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Mail sarah@example.com. Then stop.", ["Mail sarah@example.com.", "Then stop."]),
        ("See https://x.io/a.b?c=1&d=2. Ok?", ["See https://x.io/a.b?c=1&d=2.", "Ok?"]),
        ("It costs 3.50 now. Upgrade to v1.2.3 first!",
         ["It costs 3.50 now.", "Upgrade to v1.2.3 first!"]),
        ("Use tools, e.g. the shell, i.e. bash. Dr. Who and Mr. Bean agree.",
         ["Use tools, e.g. the shell, i.e. bash.", "Dr. Who and Mr. Bean agree."]),
        ("logs, configs etc. are fine. Never sudo.",
         ["logs, configs etc. are fine.", "Never sudo."]),
        ("Skip logs, configs etc. Never sudo.", ["Skip logs, configs etc.", "Never sudo."]),
        ("one; two\nthree", ["one", "two", "three"]),
        ('She said "stop." Never again.', ['She said "stop."', "Never again."]),
    ],
)
def test_sentences(text: str, expected: list[str]) -> None:
    assert sentences(text) == expected


# --------------------------------------------------------------------------- tool choice


@pytest.mark.parametrize(
    ("sentence", "tools", "expected"),
    [
        ("never use send_email for Sarah", ["gmail_read", "send_email"], "send_email"),
        ("never send email to Sarah", ["search", "Send_Email "], "send_email"),
        ("don't send-email Bob", ["send_email"], "send_email"),
        ("never email Bob", ["calendar", "gmail_send"], "gmail_send"),
        ("never e-mail Bob", ["calendar", "outlook_mail"], "outlook_mail"),
        ("never run sudo", ["browser", "run_exec"], "run_exec"),
        ("don't use the command line", ["web_search", "terminal"], "terminal"),
        ("never open that website", ["bash", "fetch_url"], "fetch_url"),
        ("don't DM the CEO", ["email", "slack_post"], "slack_post"),
        ("never book meetings on Friday", ["slack", "google_calendar"], "google_calendar"),
        ("never do that", ["calendar", "bash"], "calendar"),
        ("never do that", [], "*"),
        ("never do that", ["  "], "*"),
        ("never sendemail", ["send_email"], "send_email"),  # fallback: the first tool
        ("never use the shellfish tool", ["web", "shell"], "web"),  # whole words only
    ],
)
def test_choose_tool(sentence: str, tools: list[str], expected: str) -> None:
    assert choose_tool(sentence, tools) == expected


def test_normalise_tool() -> None:
    assert normalise_tool("  Send_Email ") == "send_email"


def test_normalise_body() -> None:
    assert normalise_body("  Don\u2019t   email\tBob!! ") == "don't email bob"
    assert normalise_body("Never \u201cCC\u201d Tom.") == 'never "cc" tom'


# --------------------------------------------------------------------------- dedupe


def test_an_edict_said_twice_is_one_rule() -> None:
    rules = _rules("Never email Sarah. never email sarah!\nNEVER  email Sarah", ["send_email"])
    assert len(rules) == 1
    assert rules[0].rule == "Never email Sarah."


def test_curly_and_straight_apostrophes_share_an_id() -> None:
    [a] = _rules("Don\u2019t email Bob.", ["send_email"])
    [b] = _rules("don't email bob", ["send_email"])
    assert a.rule_id == b.rule_id


def test_the_same_edict_on_another_tool_is_another_rule() -> None:
    [a] = _rules("Never do that.", ["send_email"])
    [b] = _rules("Never do that.", ["shell"])
    assert a.rule_id != b.rule_id


def test_ids_are_per_user() -> None:
    turn = _turn("Never do that.", ["shell", ("shell", False), ("shell", False)])
    mine = capture(TENANT, "u1", turn)
    theirs = capture(TENANT, "u2", turn)
    assert len(mine) == len(theirs) == 2
    assert not {r.rule_id for r in mine} & {r.rule_id for r in theirs}


def test_edicts_then_failures() -> None:
    turn = _turn(
        "The deploy broke again. Don't use sudo for it.",
        [("Shell", False, "exit 1\nsudo: a password is required"), ("shell ", False, None),
         ("browser", False), ("browser", False), ("browser", False), ("calendar", False)],
    )
    rules = capture(TENANT, USER, turn)
    assert [(r.tool_name, r.tags) for r in rules] == [
        ("shell", ("user-edict",)),
        ("shell", ("repeated-failure",)),
        ("browser", ("repeated-failure",)),
    ]
    assert rules[1].rule.count("\n") == 0
    assert "(exit 1 sudo: a password is required)" in rules[1].rule
    assert "failed 3 times" in rules[2].rule
    assert "()" not in rules[2].rule  # no summary, no empty reason


def test_a_long_failure_summary_is_cut() -> None:
    turn = _turn("go", [("shell", False, "permission denied " * 200), ("shell", False)])
    [rule] = capture(TENANT, USER, turn)
    assert len(rule.rule) <= MAX_BODY_CHARS
    assert rule.rule.startswith("shell failed 2 times in one turn (permission denied")
    assert rule.rule.endswith(".")


def test_a_long_tool_name_still_fits() -> None:
    name = "t" * 128
    [rule] = capture(TENANT, USER, _turn("go", [(name, False, "x " * 500), (name, False)]))
    assert len(rule.rule) <= MAX_BODY_CHARS
    assert rule.tool_name == name


# --------------------------------------------------------------------------- properties

_tool_names = st.text(min_size=1, max_size=40).filter(lambda s: len(s) <= 128)
_calls = st.lists(
    st.tuples(
        st.one_of(st.sampled_from(["shell", "send_email", "Browser", "calendar"]), _tool_names),
        st.booleans(),
        st.one_of(st.none(), st.text(max_size=300)),
    ),
    max_size=8,
)
_edict_words = st.sampled_from(
    ["never", "Never", "don't", "Don\u2019t", "do not", "stop using", "please", "ok,", ".", "!",
     "?", ";", "\n", " ", "email", "sarah@example.com", "https://x.io/a.b", "3.5", "e.g.", "etc.",
     "shell", "sudo", "```", "> ", "\u2028", "and", "I", "you", "mind", "Stop."]
)
_messages = st.one_of(
    st.text(max_size=400),
    st.lists(st.one_of(_edict_words, st.text(max_size=8)), max_size=60).map(" ".join),
    st.lists(_edict_words, max_size=80).map("".join),
)


@hsettings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_messages, _calls)
def test_capture_never_raises_and_is_well_formed(
    message: str, calls: list[tuple[str, bool, str | None]]
) -> None:
    turn = _turn(message, calls)
    rules = capture(TENANT, USER, turn)
    assert capture(TENANT, USER, turn) == rules  # deterministic, ids included
    ids = [r.rule_id for r in rules]
    assert len(ids) == len(set(ids))
    called = {normalise_tool(c[0]) for c in calls}
    for rule in rules:
        assert 0 < len(rule.rule) <= MAX_BODY_CHARS
        assert rule.rule.strip() == rule.rule
        assert "\n" not in rule.rule and "\u2028" not in rule.rule
        assert rule.priority in {"critical", "normal"}
        assert rule.tool_name == "*" or rule.tool_name in called
        if rule.tags == ("user-edict",):
            assert rule.rule_id == derived_event_id(
                "tool-rule", TENANT, USER, rule.tool_name, normalise_body(rule.rule)
            )
        else:
            assert rule.tags == ("repeated-failure",)
            assert rule.rule_id == derived_event_id(
                "tool-rule", TENANT, USER, rule.tool_name, "repeated-failure"
            )


_local = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=10)
_intact = st.one_of(
    st.builds(lambda a, b, c: f"{a}.{b}@{c}.com", _local, _local, _local),
    st.builds(lambda a, b: f"https://{a}.io/{b}.html?q=1.5", _local, _local),
    st.builds(lambda a, b: f"{a}.{b}", st.integers(0, 9999), st.integers(0, 99)),
    st.builds(lambda a, b, c: f"v{a}.{b}.{c}", st.integers(0, 99), st.integers(0, 99),
              st.integers(0, 99)),
)
_filler = st.lists(
    st.sampled_from(["Never", "email", "Sarah", "at", "e.g.", "Dr.", "use", "don't", "and"]),
    max_size=5,
).map(" ".join)


@hsettings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(_filler, _intact, st.sampled_from([".", "!", "?", ";", ""])),
                min_size=1, max_size=5))
def test_splitting_keeps_addresses_urls_and_numbers_whole(
    parts: list[tuple[str, str, str]]
) -> None:
    text = " ".join(f"{words} {token}{end}" for words, token, end in parts)
    found = sentences(text)
    for _, token, _ in parts:
        assert any(re.search(rf"(?<!\S){re.escape(token)}(?:[.!?]|$|\s)", s) for s in found)


@pytest.mark.parametrize(("message", "expected"), [
    ("Please don\u2019t ever post to #general on Slack again, and never email my boss at "
     "boss@acme.io before 9 a.m. on weekdays.",
     [("slack_post", "Please don\u2019t ever post to #general on Slack again"),
      ("gmail_send", "never email my boss at boss@acme.io before 9 a.m. on weekdays.")]),
    ("Never email Bob and stop pinging him on Slack.",
     [("gmail_send", "Never email Bob"), ("slack_post", "stop pinging him on Slack.")]),
    ("Never do that, and never mind.", [("slack_post", "Never do that, and never mind.")]),
    ("Also never email Tom.", [("gmail_send", "Also never email Tom.")]),
])
def test_joined_prohibitions_are_rules_of_their_own(message: str,
                                                    expected: list[tuple[str, str]]) -> None:
    turn = TurnRecorded(session_id="s", turn_id="t", channel="chat", user_message=message,
                        assistant_message="ok", user_at=1.0, assistant_at=2.0,
                        tool_calls=[ToolCall(tool_name="slack_post", ok=True),
                                    ToolCall(tool_name="gmail_send", ok=True)])
    assert [(r.tool_name, r.rule) for r in capture("acme", "dana", turn)] == expected


@pytest.mark.parametrize(("message", "expected"), [
    ("Never, ever email Sarah.", ["Never, ever email Sarah."]),
    ("Don't have time.", []),
    ("Don't need it anymore.", []),
    ("Don't forget to email Bob.", []),
    ("Don't hesitate to email me.", []),
])
def test_edicts_found_in_review(message: str, expected: list[str]) -> None:
    assert edicts(message) == expected


@pytest.mark.parametrize(("message", "tool"), [
    # a new user's trial: "Nunca mandes correos..." made no rule, where the reader had learned
    # the same user's Spanish preferences
    ("Nunca mandes correos a Sarah.", "gmail_send"),
    ("Por favor, no le escribas a mi jefe por Slack.", "slack_post"),
    ("Deja de usar el navegador para eso.", "browser_open"),
    ("Schick Sarah niemals E-Mails.", "gmail_send"),
    ("Nie wieder E-Mails an Sarah schicken.", "gmail_send"),
    ("Bitte keine E-Mails an Sarah.", "gmail_send"),
    ("Ab jetzt verwende nicht den Browser.", "browser_open"),
    ("N'envoie jamais d'e-mails à Sarah.", "gmail_send"),
    ("Ne m'écris plus sur Slack.", "slack_post"),
    ("Arrête d'utiliser le terminal.", "bash"),
])
def test_spanish_german_and_french_prohibitions_are_rules_on_their_tools(message: str,
                                                                         tool: str) -> None:
    turn = TurnRecorded(session_id="s1", turn_id="t1", channel="web", user_message=message,
                        assistant_message="ok", user_at=1.0, assistant_at=2.0,
                        tool_calls=[ToolCall(tool_name=name, ok=True) for name in (
                            "slack_post", "gmail_send", "browser_open", "bash")])
    [rule] = capture("acme", "dana", turn)
    assert (rule.tool_name, rule.rule, rule.priority) == (tool, message, "critical")


@pytest.mark.parametrize("message", [
    # what the user says of themselves, reassurance, refusals, questions, idioms
    "No sé.", "No te preocupes.", "No tengo tiempo.", "Nunca he usado Slack.", "No, gracias.",
    "No olvides enviar el informe.", "No me digas.", "¿No puedes mandar correos?",
    "Ich benutze nie sudo.", "Keine Ahnung.", "Kein Problem!", "Nie gehört.", "Nie wieder!",
    "Sarah schickt nie E-Mails.", "Schick mir die Datei.", "Ich weiß nicht.",
    "Je n'aime pas Slack.", "N'oublie pas le rapport.", "Ne t'inquiète pas.", "Non merci.",
    # English that opens as Spanish would
    "No changes needed.", "No messages yet.", "No issues found.", "No notes today.",
])
def test_what_orders_nothing_in_spanish_german_and_french(message: str) -> None:
    assert edicts(message) == []


@pytest.mark.parametrize(("message", "expected"), [
    # the speaker's wish as the order
    ("I never want you to reply-all.", ["I never want you to reply-all."]),
    ("I don't want you to book Ryanair flights.", ["I don't want you to book Ryanair flights."]),
    ("I don't want you to worry.", []),
    ("I never want you to be sad.", []),
    # a hyphenated verb after "stop"
    ("Stop auto-accepting meeting invites.", ["Stop auto-accepting meeting invites."]),
    ("Never be late.", []),
])
def test_a_wish_that_the_agent_never_does_something_is_an_edict(
        message: str, expected: list[str]) -> None:
    assert edicts(message) == expected
