"""The statement reader on realistic messages, and its measured accuracy as a floor."""

from __future__ import annotations

import pytest

from habitus.events.domain import Stance
from services.producers.evaluate import evaluate, load
from services.producers.reading.reader import StatementReader

READER = StatementReader()


def read(message: str) -> list[tuple[str, str, str, str]]:
    [found] = READER.read([message])
    return [(s.facet_class, s.key, s.value, s.stance.value) for s in found]


@pytest.mark.parametrize(("message", "expected"), [
    ("I'd rather you skip the intro.", [("style", "preamble", "skip", "standing")]),
    ("We deploy with pnpm, not npm.", [("tooling", "package_manager", "pnpm", "standing")]),
    ("Call me Sam.", [("identity", "preferred_name", "Sam", "standing")]),
    ("Antworte bitte auf Deutsch", [("style", "language", "de", "standing")]),
    ("Actually, switch back to English.", [("style", "language", "en", "standing")]),
    ("I'm in Bangalore, so give times in IST.",
     [("identity", "location", "Bengaluru", "standing"),
      ("identity", "timezone", "Asia/Kolkata", "standing")]),
    ("Use Python for examples, not Go.", [("tooling", "language", "python", "standing")]),
    ("From now on no emojis.", [("style", "emoji", "none", "declared")]),
    ("shorter", [("style", "verbosity", "terse", "one_off")]),
    ("Can you keep answers short?", [("style", "verbosity", "terse", "standing")]),
])
def test_plain_statements(message: str, expected: list[tuple[str, str, str, str]]) -> None:
    assert read(message) == expected


@pytest.mark.parametrize("message", [
    "My manager uses Windows.", "Should I use pnpm?", "What time is it in Berlin?",
    "If I switched to Rust, would it be faster?", "thanks!", "I used to work at Acme.",
    'The style guide says "use tables".', "",
])
def test_what_states_nothing(message: str) -> None:
    assert read(message) == []


@pytest.mark.parametrize("message", ["Prefiero respuestas cortas.", "Respuestas cortas, por favor.",
                                     "Prefiero respuestas más cortas.",
                                     "Vivo en Valencia y prefiero respuestas cortas."])
def test_spanish_short_answers_are_read_in_the_feminine_too(message: str) -> None:
    """"respuestas" is feminine: "cortas" went unread where "cortos" was read."""
    assert ("style", "verbosity", "terse", "standing") in read(message)


def test_spanish_cutting_is_not_brevity() -> None:
    assert [s for s in read("Ayer cortaron la luz en la oficina.") if s[1] == "verbosity"] == []


@pytest.mark.parametrize("message", ["Please don't use tables, I read these on my phone.",
                                     "No tables please.", "Keine Tabellen bitte.",
                                     "Pas de tableaux.", "Sin tablas, por favor."])
def test_no_tables_is_a_veto_on_tables(message: str) -> None:
    """A veto the vocabulary has (format=tables) had no words to be read by."""
    assert read(message) == [("veto", "format=tables", "banned", "standing")]


@pytest.mark.parametrize("message", ["Tables please.", "I prefer tables."])
def test_asking_for_tables_is_still_the_format(message: str) -> None:
    assert read(message) == [("style", "format", "tables", "standing")]


@pytest.mark.parametrize("message", ["Tutoie-moi.", "Trátame de tú, por favor.",
                                     "Háblame de tú."])
def test_the_familiar_you_asked_for_is_a_casual_tone(message: str) -> None:
    assert read(message) == [("style", "tone", "casual", "standing")]


def test_tables_and_tu_in_other_senses_state_nothing() -> None:
    assert read("The table is missing a column.") == []
    assert read("Hablamos de tú a tú en la reunión.") == []


@pytest.mark.parametrize(("message", "register"), [
    ("Could you be a bit less formal?", "casual"), ("Sei bitte weniger förmlich.", "casual"),
    ("Not so formal please.", "casual"), ("Less formal please.", "casual"),
    ("Moins formel, s'il te plaît.", "casual"), ("Don't be so casual with me.", "formal")])
def test_a_register_said_away_is_the_other_one(message: str, register: str) -> None:
    """"Less formal" was read as formal: the tone's words were taken at face value."""
    assert [s[:3] for s in read(message)] == [("style", "tone", register)]


@pytest.mark.parametrize("message", ["Not so formal please.",
                                     "No need to be so formal with me."])
def test_not_so_formal_is_never_read_as_formal(message: str) -> None:
    """"so" joined two clauses here, leaving "formal please" to be read alone."""
    assert ("style", "tone", "formal", "standing") not in read(message)


@pytest.mark.parametrize("message", ["Duz mich bitte.", "No need to be so formal with me.",
                                     "You can drop the formalities."])
def test_the_casual_register_asked_for_in_other_words_is_casual(message: str) -> None:
    """"Duz mich bitte" was read as formal by the encoder and then dropped; "no need to be so
    formal" and "drop the formalities" said the formal register away without a word the
    reader knew as a flip."""
    assert read(message) == [("style", "tone", "casual", "standing")]


@pytest.mark.parametrize("message", ["Bitte keine langen Erklärungen.",
                                     "Keine langen Erklärungen bitte, nur das Ergebnis.",
                                     "Pas de longues explications, s'il te plaît.",
                                     "Nada de explicaciones largas, por favor.",
                                     "No long explanations please."])
def test_long_explanations_said_away_is_brevity(message: str) -> None:
    """The English form was read; the German, French and Spanish were not (the encoder was
    undecided, or the words were not the key's)."""
    assert read(message) == [("style", "verbosity", "terse", "standing")]


def test_long_explanations_asked_for_stay_detailed() -> None:
    assert read("J'aime les longues explications.") == [
        ("style", "verbosity", "detailed", "standing")]
    assert read("I want long explanations.") == [("style", "verbosity", "detailed", "standing")]


def test_a_name_after_by_my_first_name_is_the_name_to_be_called_by() -> None:
    assert read("Please call me by my first name, Sam.") == [
        ("identity", "preferred_name", "Sam", "standing")]
    assert read("Thanks, Sam, that works.") == []


@pytest.mark.parametrize("message", [
    "Bitte antworte immer auf Englisch, auch wenn ich Deutsch schreibe.",
    "Answer in English even if I write in German.",
    "Réponds toujours en anglais, même si j'écris en français.",
    "Responde siempre en inglés, incluso si escribo en español."])
def test_a_concession_is_no_hypothesis(message: str) -> None:
    """"Even if I write in German" made the whole sentence hypothetical, and nothing was read;
    it also looks past this answer, so the preference stands."""
    assert [s[:3] for s in read(message)] == [("style", "language", "en")]
    assert read(message)[0][3] in ("standing", "declared")


def test_a_condition_is_still_a_hypothesis() -> None:
    assert read("If I write in German, answer in German.") == []
    assert read("Wenn ich Deutsch schreibe, antworte auf Deutsch.") == []


def test_the_register_named_decides_when_the_encoder_names_another_key() -> None:
    assert read("Can you make your answers a bit more casual?") == [
        ("style", "tone", "casual", "standing")]
    assert read("Gern mit Emojis, das lockert auf") == [("style", "emoji", "ok", "standing")]


@pytest.mark.parametrize(("message", "name"), [("Address me as Dr. Chen please.", "Dr. Chen"),
                                               ("Please refer to me as Alex.", "Alex"),
                                               ("Nennt mich Frau Weber.", "Frau Weber")])
def test_the_name_to_be_addressed_by_keeps_its_title(message: str, name: str) -> None:
    assert read(message) == [("identity", "preferred_name", name, "standing")]


@pytest.mark.parametrize(("message", "tool"), [
    ("We switched from Jenkins to GitHub Actions last quarter.", "github-actions"),
    ("Our CI runs on GitLab CI.", "gitlab-ci"), ("We use CircleCI for builds.", "circleci")])
def test_the_ci_a_team_uses_is_its_ci_tool(message: str, tool: str) -> None:
    assert read(message) == [("tooling", "ci", tool, "standing")]


def test_a_person_who_shares_a_tools_name_is_no_tool() -> None:
    assert read("Mr Jenkins will join the call.") == []


@pytest.mark.parametrize(("message", "key"), [
    ("I don't want headings in answers.", "format=headings"),
    ("No code blocks, just inline code.", "format=code-blocks"),
    ("I don't want caveats in answers.", "content=caveats")])
def test_a_banned_thing_is_a_veto_when_the_style_read_has_no_words(message: str,
                                                                   key: str) -> None:
    """The encoder read these as detail or code-first, which their words do not hold, and
    nothing was stated."""
    assert read(message) == [("veto", key, "banned", "standing")]


def test_a_banned_thing_beside_a_style_keeps_both() -> None:
    assert [s[:3] for s in read("I want detailed answers, no caveats.")] == [
        ("style", "verbosity", "detailed"), ("veto", "content=caveats", "banned")]


@pytest.mark.parametrize(("message", "expected"), [
    ("I'm not a fan of long intros, get to the point.", [("style", "preamble", "skip")]),
    ("Actually I moved from Berlin to Hamburg last year.",
     [("identity", "location", "Hamburg")]),
    ("I switched from VS Code to Cursor.", [("tooling", "editor", "cursor")]),
    ("Keep your replies under 3 sentences.", [("style", "verbosity", "terse")]),
    ("Mon entreprise s'appelle Qonto, je suis dev backend.",
     [("identity", "employer", "Qonto"), ("identity", "role", "developer")]),
    ("Meine Firma heißt Bosch.", [("identity", "employer", "Bosch")])])
def test_what_a_second_new_user_trial_found(message: str,
                                            expected: list[tuple[str, str, str]]) -> None:
    """Each stated nothing before: the encoder named no key or one its words do not hold, a
    city after "moved from ... to" was never looked up, a company "called" X was no cue."""
    assert [s[:3] for s in read(message)] == expected


def test_what_those_readings_leave_alone() -> None:
    assert read("this time answer in Italian, I'm sending it straight to my nonna") == [
        ("style", "language", "it", "one_off")]
    assert read("The team switched to Cursor.") == []
    assert read("Write the summary in under 5 sentences.") == []
    assert read("I'd love a few examples whenever you explain something.") == [
        ("style", "examples", "include", "standing")]  # "whenever": not this answer only


@pytest.mark.parametrize(("message", "expected"), [
    ("I prefer yarn for installs.", ("tooling", "package_manager", "yarn")),
    ("I prefer pnpm over npm for installs.", ("tooling", "package_manager", "pnpm")),
    ("We use pnpm for the monorepo.", ("tooling", "package_manager", "pnpm")),
    ("I like vim for quick edits.", ("tooling", "editor", "vim"))])
def test_a_tool_the_speaker_uses_or_prefers_is_read_whatever_follows_it(
        message: str, expected: tuple[str, str, str]) -> None:
    """The encoder read "I prefer yarn for installs" as nothing (a third new-user trial sent
    it); the words say it: the speaker's "prefer"/"use" right before a named tool."""
    assert [s[:3] for s in read(message)] == [expected]


def test_a_tool_someone_else_uses_or_one_asked_about_is_not_the_users() -> None:
    assert read("My manager prefers yarn for installs.") == []
    assert read("Do you prefer yarn for installs?") == []
    assert read("If I used yarn for installs, would it be faster?") == []
    assert read("I use it with yarn sometimes, is that fine?") == []


@pytest.mark.parametrize(("message", "expected"), [
    ("My pronouns are they/them.", [("identity", "pronouns", "they/them")]),
    ("I use she/her pronouns.", [("identity", "pronouns", "she/her")]),
    ("I go by he/they.", [("identity", "pronouns", "he/they")]),
    ("I use any pronouns.", [("identity", "pronouns", "any")]),
    ("Hi, I'm Alex (they/them).", [("identity", "name", "Alex"),
                                   ("identity", "pronouns", "they/them")])])
def test_the_speakers_pronouns_are_identity(message: str,
                                            expected: list[tuple[str, str, str]]) -> None:
    """A fourth new-user trial's "My pronouns are they/them." was read as nothing: the
    vocabulary had no key for them, and the encoder read "I go by he/they" as a tone."""
    assert [s[:3] for s in read(message)] == expected


def test_someone_elses_pronouns_or_a_question_about_them_are_not_the_users() -> None:
    assert read("My friend's pronouns are she/her.") == []
    assert read("My manager Sam (she/her) prefers tables.") == []
    assert read("What are your pronouns?") == []


@pytest.mark.parametrize(("message", "employer"), [
    ("I work as a nurse at Mercy Hospital.", "Mercy Hospital"),
    ("I'm a teacher at Lincoln High School.", "Lincoln High School"),
    ("I am a pharmacist at Boots in London.", "Boots"),
    ("I'm a paralegal at Hale & Dorr in Boston.", "Hale & Dorr")])
def test_a_named_place_right_after_the_speakers_role_is_their_employer(message: str,
                                                                      employer: str) -> None:
    """The employer cues named only the software trade's roles ("engineer at"): "a nurse at
    Mercy Hospital" gave the role alone."""
    assert ("identity", "employer", employer) in [s[:3] for s in read(message)]


def test_any_role_said_beside_the_speakers_name_is_theirs() -> None:
    """A new-user trial's "Hi! I'm Ana (she/her), a nurse at Mercy Hospital." gave the name
    and pronouns alone: a role with no "I'm" of its own was read only for the software
    trade's roles."""
    assert [s[:3] for s in read("Hi! I'm Ana (she/her), a nurse at Mercy Hospital.")] == [
        ("identity", "name", "Ana"), ("identity", "pronouns", "she/her"),
        ("identity", "role", "nurse"), ("identity", "employer", "Mercy Hospital")]
    assert ("identity", "role", "pilot") in [s[:3] for s in read("I'm Tom, a pilot.")]
    assert read("A nurse at the clinic said I should rest.") == []


def test_when_after_a_role_or_someone_elses_workplace_is_no_employer() -> None:
    assert [s[:3] for s in read("I'm a teacher at Christmas time.")] == [
        ("identity", "role", "teacher")]
    assert read("My sister is a nurse at Mercy Hospital.") == []
    assert read("I used to be a nurse at Mercy Hospital.") == []


@pytest.mark.parametrize(("message", "thing"), [
    ("I hate it when you apologize all the time, just fix the thing.", "content=apologies"),
    ("Enough with the apologies.", "content=apologies"),
    ("I'm tired of all the disclaimers.", "content=disclaimers"),
    ("I can't stand tables in chat.", "format=tables")])
def test_a_dislike_of_what_answers_do_is_a_veto(message: str, thing: str) -> None:
    assert read(message) == [("veto", thing, "banned", "standing")]


def test_a_dislike_of_anything_else_bans_nothing() -> None:
    assert read("I hate it when the build breaks on Fridays.") == []
    assert read("I can't stand my manager's jargon.") == []


@pytest.mark.parametrize(("message", "expected"), [
    ("I prefer answers in bullet points.", ("style", "format", "bullets")),
    ("Be more casual with me.", ("style", "tone", "casual")),
    ("We prefer prose over bullet points.", ("style", "format", "prose")),
    ("My email is jo@example.org", ("identity", "email", "jo@example.org")),
    ("My work email is Jo.Smith@Acme.io.", ("identity", "email", "jo.smith@acme.io")),
    ("Please don't use markdown.", ("veto", "format=markdown", "banned")),
    ("No filler please.", ("veto", "content=filler", "banned"))])
def test_what_a_fifth_trial_said_plainly_is_read(message: str,
                                                 expected: tuple[str, str, str]) -> None:
    """Each was read as nothing (the encoder's nearest examples were too close to call, or
    the vocabulary's thing had no words), or as the opposite ("prose over bullet points" was
    bullets)."""
    assert [s[:3] for s in read(message)] == [expected]


@pytest.mark.parametrize(("message", "expected"), [
    ("Je déteste quand tu mets des emojis.", ("style", "emoji", "none")),  # was emoji=ok
    ("I hate it when you use emojis.", ("style", "emoji", "none")),
    ("Ich bevorzuge Antworten in Stichpunkten.", ("style", "format", "bullets")),
    ("Prefiero respuestas en viñetas.", ("style", "format", "bullets")),
    ("Odio cuando te disculpas todo el tiempo.", ("veto", "content=apologies", "banned")),
    # the dislike and its thing in two clauses
    ("Ich hasse es, wenn du dich ständig entschuldigst.",
     ("veto", "content=apologies", "banned")),
    ("Honestly I just want the answer, not an essay.", ("style", "verbosity", "terse"))])
def test_a_sixth_rounds_dislikes_and_preferences_in_four_languages(
        message: str, expected: tuple[str, str, str]) -> None:
    """A dislike a few words before the thing ("hate it when you use ...") turns it as a
    "no" right before it does; a preference said with the speaker's verb in German, French or
    Spanish is read by its words as in English."""
    assert [s[:3] for s in read(message)] == [expected]


@pytest.mark.parametrize(("message", "expected"), [
    ("Too formal, loosen up.", ("style", "tone", "casual")),  # was tone=formal
    ("Your answers are too short.", ("style", "verbosity", "detailed")),
    ("Too many emojis.", ("style", "emoji", "none")),
    ("Viel zu förmlich.", ("style", "tone", "casual")),
    ("C'est trop formel.", ("style", "tone", "casual")),
    ("Bitte wechsle zu kurzen Antworten.", ("style", "verbosity", "terse")),
    ("Me too, short answers please.", ("style", "verbosity", "terse"))])
def test_too_much_of_a_style_asks_for_the_other(message: str,
                                                expected: tuple[str, str, str]) -> None:
    assert [s[:3] for s in read(message)] == [expected]


def test_a_seventh_rounds_misreadings() -> None:
    """Each was read wrong before: the full name named beside the one to use made the
    sentence "about someone else"; "I speak German" was an answer language; a ban on what
    e-mails say was e-mail as the channel."""
    assert ("identity", "preferred_name", "Liz") in [
        s[:3] for s in read("call me Liz, Elizabeth is too formal")]
    assert [s[:3] for s in read("i speak german natively but english is fine for work stuff")
            ] == [("style", "language", "en")]
    assert read("We speak Spanish at home.") == []
    assert read("don't use my full name in emails") == []
    assert [s[:3] for s in read("Speak German with me.")] == [("style", "language", "de")]
    assert [s[:3] for s in read("Don't use email, ping me on Slack.")] == [
        ("channel", "primary", "slack")]
    assert read("Sarah says to call me Liz.") == []


def test_a_stay_is_not_where_the_user_lives() -> None:
    assert [s[:3] for s in read("I'm based in Toronto but I'm in London this week.")] == [
        ("identity", "location", "Toronto")]
    assert read("I'm in Rome for a conference.") == []
    assert [s[:3] for s in read("I'm in Lisbon now.")] == [("identity", "location", "Lisbon")]


@pytest.mark.parametrize(("message", "expected"), [
    ("Use metric units.", ("style", "units", "metric")),
    ("Please use the metric system.", ("style", "units", "metric")),
    ("I prefer imperial.", ("style", "units", "imperial")),
    ("Bitte metrische Einheiten.", ("style", "units", "metric")),
    ("Use 24-hour time please.", ("style", "clock", "24h")),
    ("24h format please.", ("style", "clock", "24h")),
    ("Times in am/pm please.", ("style", "clock", "12h"))])
def test_units_and_clock_format_named_as_the_ones_to_use(
        message: str, expected: tuple[str, str, str]) -> None:
    """Two settings the vocabulary lacked, among the commonest an assistant is told."""
    assert [s[:3] for s in read(message)] == [expected]


def test_a_distance_a_duration_or_a_conversion_is_no_setting() -> None:
    assert read("I ran five miles this morning.") == []
    assert read("I need this in 24 hours.") == []
    assert read("We left 12 hours ago.") == []
    assert read("Can you convert 5 miles to km?") == []


def test_a_language_the_speaker_prefers_is_the_answer_language() -> None:
    assert [s[:3] for s in read("My native language is Hindi but I prefer English.")] == [
        ("style", "language", "en")]
    assert [s[:3] for s in read("I prefer Python for scripts.")] == [
        ("tooling", "language", "python")]


def test_i_said_insists_unless_the_sentence_moves_off_it() -> None:
    """"No, I said Spanish, not Portuguese." and "I told you I don't use Windows." were read
    as taking the value back: a correction the user had to repeat went unlearned."""
    assert [s[:3] for s in read("No, I said Spanish, not Portuguese.")] == [
        ("style", "language", "es")]
    assert [s[:3] for s in read("I told you I don't use Windows.")] == [
        ("veto", "tool=windows", "banned")]
    # moved off: what was said is taken back (tests/unit/test_retractions.py), the new value
    # stated
    assert read("I said Python earlier, but we use Go.") == [
        ("tooling", "language", "python", "denied"), ("tooling", "language", "go", "standing")]
    assert [s for s in read("I said tables before, forget that.") if s[3] != "denied"] == []
    assert ("identity", "employer", "Initech") not in [
        s[:3] for s in read("I said I'm at Initech, I meant Initrode.")]


def test_an_essay_or_a_dislike_of_anything_else_is_no_style() -> None:
    assert read("I'm writing an essay on climate policy.") == []
    assert read("I want an essay on the French revolution.") == []
    assert read("I hate it when the tests take long.") == []
    assert read("Ich hasse es, wenn der Build bricht.") == []
    assert read("I love emojis.") == [("style", "emoji", "ok", "standing")]


def test_a_list_asked_for_or_someone_elses_address_is_no_preference() -> None:
    assert read("I want a list of all the endpoints.") == []  # was format=prose
    assert read("My manager's email is bob@acme.io") == []
    assert read("I prefer the second option.") == []
    assert [s[:3] for s in read("Email me at jo@example.org.")] == [
        ("channel", "primary", "email")]


@pytest.mark.parametrize("message", [
    "Don't explain basic Python to me, I've been writing it for 10 years.",
    "Erklär mir bitte kein Python."])
def test_a_ban_on_explaining_a_tool_is_no_ban_of_the_tool(message: str) -> None:
    """Read as `veto/tool=python`: the opposite of what an expert user said."""
    assert not [s for s in read(message) if s[0] == "veto"]


def test_a_ban_of_a_tool_is_still_one() -> None:
    assert read("Don't use Redux.") == [("veto", "tool=redux", "banned", "standing")]


@pytest.mark.parametrize("message", ["Sin tecnicismos, por favor.", "Bitte kein Fachchinesisch."])
def test_jargon_in_spanish_and_german_is_jargon(message: str) -> None:
    assert read(message) == [("veto", "content=jargon", "banned", "standing")]


def test_a_citys_time_is_its_zone() -> None:
    for message in ("My timezone changed, use Lisbon time please.", "I work on Lisbon time.",
                    "Please give times in Lisbon time."):
        assert read(message) == [("identity", "timezone", "Europe/Lisbon", "standing")]
    assert read("Reading time is 5 minutes.") == []


@pytest.mark.parametrize(("message", "expected"), [
    ("Please answer in simple English, I'm still learning.", [("style", "language", "en")]),
    ("I'm the CTO of a small startup called Fernwood.",
     [("identity", "role", "cto"), ("identity", "employer", "Fernwood")])])
def test_what_a_fourth_trial_found(message: str, expected: list[tuple[str, str, str]]) -> None:
    """"in simple English" was no frame for a language; "the CTO" was someone else even when
    the user said they are the CTO."""
    assert [s[:3] for s in read(message)] == expected


def test_the_cto_someone_else_names_is_still_someone_else() -> None:
    assert read("The CTO wants tables.") == []
    assert [s[:3] for s in read("I'm the CTO and my CEO prefers tables.")] == [
        ("identity", "role", "cto")]


@pytest.mark.parametrize(("message", "expected"), [
    ("My boss wants tables, but personally I prefer prose.", ("style", "format", "prose")),
    ("Mein Chef will Tabellen, aber für mich sind Stichpunkte besser.",
     ("style", "format", "bullets")),
    ("He said to keep it short, but I like detailed answers.",
     ("style", "verbosity", "detailed"))])
def test_the_users_own_view_set_against_someone_elses_is_read(
        message: str, expected: tuple[str, str, str]) -> None:
    """Someone else's words silenced the whole sentence, the user's own half too."""
    assert [s[:3] for s in read(message)] == [expected]


def test_someone_elses_words_alone_state_nothing() -> None:
    assert read("Sarah says to keep it short.") == []


@pytest.mark.parametrize(("message", "expected"), [
    ("I'm Aisha, a data scientist at Shopify, working remotely from Nairobi.",
     [("identity", "name", "Aisha"), ("identity", "role", "data scientist"),
      ("identity", "employer", "Shopify"), ("identity", "location", "Nairobi")]),
    ("Je bosse chez Alan comme lead dev.",
     [("identity", "employer", "Alan"), ("identity", "role", "lead developer")]),
    ("Hit me up on Discord.", [("channel", "primary", "discord")]),
    ("Trabajo en Ubuntu casi siempre.", [("tooling", "os", "ubuntu")]),
    ("I work at Vercel.", [("identity", "employer", "Vercel")])])
def test_what_a_fifth_trial_found(message: str, expected: list[tuple[str, str, str]]) -> None:
    """Working "remotely from" a city, "je bosse chez", "hit me up"; and "trabajo en Ubuntu",
    whose bank example was read as an employer and tied with "trabajo en Telefónica"."""
    assert [s[:3] for s in read(message)] == expected


def test_where_someone_is_from_is_still_no_location() -> None:
    assert read("I'm from Nairobi originally.") == []
    assert read("I am from Munich") == []


@pytest.mark.parametrize(("message", "expected"), [
    ("I use Neovim and Rust.",
     [("tooling", "editor", "neovim"), ("tooling", "language", "rust")]),
    ("We use Postgres and Go.",
     [("tooling", "database", "postgres"), ("tooling", "language", "go")]),
    # a word, not the language: lower case, or no tool before it
    ("I like Neovim, and go deeper on the parser please.", [("tooling", "editor", "neovim")])])
def test_an_everyday_word_listed_after_a_tool_is_a_tool(
        message: str, expected: list[tuple[str, str, str]]) -> None:
    """"Rust" and "Go" are tools only where the words say so ("use Rust"); a list is split at
    its "and", so the second item of "I use Neovim and Rust" lost the verb and was read as a
    word."""
    assert [s[:3] for s in read(message)] == expected


@pytest.mark.parametrize(("message", "expected"), [
    ("I'm Jan from Hamburg", [("identity", "name", "Jan"), ("identity", "location", "Hamburg")]),
    ("Hi, I'm Maria from Lisbon and I work on payments.",
     [("identity", "name", "Maria"), ("identity", "location", "Lisbon")]),
    ("Ich bin Jan aus Hamburg.",
     [("identity", "name", "Jan"), ("identity", "location", "Hamburg")]),
    # "de" and a city after the name: where the speaker is from, not part of the name
    ("Soy Ana de Sevilla.", [("identity", "name", "Ana"), ("identity", "location", "Sevilla")]),
    ("Je suis Marie de Lyon.",
     [("identity", "name", "Marie"), ("identity", "location", "Lyon")]),
    ("Soy Ana de Armas.", [("identity", "name", "Ana de Armas")]),
    # a company or a team is no place
    ("I'm Jan from Acme", [("identity", "name", "Jan")]),
    ("I'm Jan from the Hamburg office", [("identity", "name", "Jan")])])
def test_a_name_and_where_from_in_one_introduction(message: str,
                                                   expected: list[tuple[str, str, str]]) -> None:
    """Introducing oneself by name and city says both ("I'm Jan from Hamburg"); the location
    was lost, because only a word that places someone ("in", "based in") led to a city."""
    assert [s[:3] for s in read(message)] == expected


@pytest.mark.parametrize(("message", "expected"), [
    ("Nenn mich bitte einfach Kathi.", [("identity", "preferred_name", "Kathi")]),
    ("Mi nombre es Javier, pero me dicen Javi.",
     [("identity", "name", "Javier"), ("identity", "preferred_name", "Javi")]),
    ("Je préfère TypeScript à JavaScript.", [("tooling", "language", "typescript")]),
    ("Évite les listes à puces, s'il te plaît.", [("style", "format", "prose")]),
    ("Vermeide Emojis bitte.", [("style", "emoji", "none")])])
def test_what_a_sixth_trial_found(message: str, expected: list[tuple[str, str, str]]) -> None:
    """"bitte" between the verb and the name; "me dicen"; the loser of "préférer X à Y" was
    read as used too; "évite les listes à puces" was read as asking for bullets."""
    assert [s[:3] for s in read(message)] == expected


def test_an_english_preference_for_a_thing_is_no_comparison() -> None:
    assert read("I prefer a phone call for anything urgent") == [
        ("channel", "primary", "phone", "standing")]


def test_talk_to_me_like_a_friend_is_casual() -> None:
    """"a friend" was someone else, and a likeness no word of the register."""
    assert read("Talk to me like a friend, not like a manual.") == [
        ("style", "tone", "casual", "standing")]
    assert read("My friend likes tables.") == []


def test_plain_text_is_no_text_message() -> None:
    """"Prefer responses in plain text" was read as `channel/primary=sms`."""
    assert not [x for x in read("Prefer responses in plain text, no markdown formatting.")
                if x[0] == "channel"]
    assert read("Text me instead of calling.") == [("channel", "primary", "sms", "standing")]


@pytest.mark.parametrize(("message", "expected"), [
    ("My name's Chris and I'm a PM at Atlassian.",
     [("identity", "name", "Chris"), ("identity", "role", "product manager"),
      ("identity", "employer", "Atlassian")]),
    ("I'm a senior SRE at Datadog.", [("identity", "role", "sre"),
                                      ("identity", "employer", "Datadog")]),
    ("Mon prénom c'est Léa.", [("identity", "name", "Léa")])])
def test_what_an_eighth_trial_found(message: str, expected: list[tuple[str, str, str]]) -> None:
    assert [s[:3] for s in read(message)] == expected


def test_so_still_joins_two_clauses() -> None:
    assert read("I'm on mobile so keep it short.") == [
        ("style", "verbosity", "terse", "standing")]


@pytest.mark.parametrize(("message", "tag"), [
    ("Please reply in British English.", "en-GB"), ("Answer in Brazilian Portuguese.", "pt-BR"),
    ("Mexican Spanish please.", "es-MX"), ("In plain English please.", "en")])
def test_a_regional_language_is_its_regional_tag(message: str, tag: str) -> None:
    """"in British English" read nothing: the answer frame ("in") was two words away."""
    assert [s[:3] for s in read(message)] == [("style", "language", tag)]


def test_a_place_left_is_not_where_the_user_is() -> None:
    """"I no longer live in Berlin" was read as living in Berlin."""
    assert read("I no longer live in Berlin, I'm in Munich now.") == [
        ("identity", "location", "Munich", "standing")]
    assert read("I no longer live in Berlin.") == []


@pytest.mark.parametrize(("message", "name"), [("Du kannst mich Max nennen.", "Max"),
                                             ("Sie können mich gerne Frau Weber nennen.",
                                              "Frau Weber")])
def test_the_german_order_of_a_name_to_be_called_by(message: str, name: str) -> None:
    """The name before its verb ("... mich Max nennen") was not read; "nenn mich Max" was."""
    assert read(message) == [("identity", "preferred_name", name, "standing")]


def test_a_tool_named_as_the_place_of_a_ban_is_not_banned() -> None:
    """"No semicolons in JS" banned JavaScript."""
    assert read("No semicolons in JS please.") == []
    assert read("No jQuery please.") == [("veto", "tool=jquery", "banned", "standing")]


def test_an_app_named_beats_the_verb_text() -> None:
    """"Text me on Telegram" was read as SMS: "text" is also a channel word."""
    assert [s[:3] for s in read("Text me on Telegram if it's urgent.")] == [
        ("channel", "primary", "telegram")]
    assert [s[:3] for s in read("Text me if it's urgent.")] == [("channel", "primary", "sms")]


@pytest.mark.parametrize("message", ["Keep answers under 100 words.",
                                     "Bitte höchstens 80 Wörter.",
                                     "Moins de 100 mots, s'il te plaît."])
def test_a_word_limit_is_brevity(message: str) -> None:
    assert read(message) == [("style", "verbosity", "terse", "standing")]


@pytest.mark.parametrize("limit", [50, 80, 100, 250])
def test_any_word_limit_on_answers_is_brevity(limit: int) -> None:
    """The encoder read "under 100 words" as brevity and "under 80 words" as nothing."""
    assert ("style", "verbosity", "terse", "standing") in read(
        f"Not so formal please, and keep answers under {limit} words.")


@pytest.mark.parametrize("message", ["Keep answers under five lines.",
                                     "Please keep answers under five lines.",
                                     "Answers under three sentences, please.",
                                     "Bitte antworte in maximal drei Sätzen."])
def test_a_limit_counted_in_words_is_brevity(message: str) -> None:
    """Seen in a trial: "please keep answers under five lines" was not heard (the limit's
    words knew only digits)."""
    assert read(message) == [("style", "verbosity", "terse", "standing")]


@pytest.mark.parametrize("message", ["The script is under five lines.",
                                     "It's under 5 lines, so fine.",
                                     "The report had five lines of errors."])
def test_a_length_described_is_no_limit(message: str) -> None:
    assert read(message) == []


def test_a_german_request_with_its_verb_last_is_heard() -> None:
    """Seen in a trial: "Ab jetzt bitte mit Tabellen antworten." (the infinitive last, as
    German asks politely) was not heard, though "Antworte ab jetzt mit Tabellen." was."""
    assert [s[:3] for s in read("Ab jetzt bitte mit Tabellen antworten.")] == [
        ("style", "format", "tables")]


def test_a_word_limit_of_a_text_asked_for_is_that_texts() -> None:
    assert read("Write a summary under 100 words.") == []
    assert read("The essay must be under 500 words.") == []


def test_a_month_is_no_place() -> None:
    """March (Cambridgeshire) and Mai (Kenya) are cities of the gazetteer: "I moved to Lisbon
    in March" was two locations, Lisbon and March."""
    assert read("I moved to Lisbon in March.") == [
        ("identity", "location", "Lisbon", "standing")]
    assert [s for s in read("Ich bin im Mai nach Hamburg gezogen.") if s[2] == "Mai"] == []


@pytest.mark.parametrize("name", ["Ben", "Dan", "Eve", "Tom"])
def test_a_name_that_is_also_a_language_code_is_a_name(name: str) -> None:
    """"ben" and "dan" are ISO 639 codes (Bengali, Danish): "My name is Ben." was read as no
    name at all, because a name that is a language is refused."""
    assert read(f"My name is {name}.") == [("identity", "name", name, "standing")]
    assert read(f"Hi, I'm {name}.") == [("identity", "name", name, "standing")]


@pytest.mark.parametrize("message", ["I am German.", "Ich bin Deutscher.", "Je suis Français.",
                                     "I'm Brazilian."])
def test_a_language_or_its_people_is_still_no_name(message: str) -> None:
    assert [s for s in read(message) if s[1] == "name"] == []


def test_a_correction_names_the_new_value_only() -> None:
    found = read("Scratch what I said about pnpm: we moved to bun last week, "
                 "so use bun from now on.")
    assert ("tooling", "package_manager", "bun") in {f[:3] for f in found}
    assert all(f[3] == "denied" for f in found if f[2] == "pnpm")  # taken back, not stated


def test_a_language_taken_back_by_accepting_another_is_read_as_that_one() -> None:
    """Said after "Please answer me in Spanish" (a new user's trial): a correction that names
    the language it accepts, not one it asks for, was read as nothing, and the profile kept
    Spanish. A language someone's English is praised in is no preference."""
    assert read("Actually, not Spanish: English is fine after all.") == [
        ("style", "language", "en", "standing")]
    assert read("I changed my mind, English is fine.") == [
        ("style", "language", "en", "standing")]
    assert read("Your English is fine, by the way.") == []
    assert read("The German translation is fine.") == []


def test_a_clause_that_is_an_example_but_for_its_values_takes_that_examples_label() -> None:
    """"I moved to Berlin last month" is the bank's "I moved to Madrid last month" with
    another city, yet two looser `none` examples outvoted it, and a relocation was missed."""
    assert read("Actually, I moved to Berlin last month.") == [
        ("identity", "location", "Berlin", "standing")]
    assert read("My sister moved to Berlin last month.") == []


def test_a_batch_reads_each_message_on_its_own() -> None:
    out = READER.read(["No emojis, please.", "hello", "Call me Sam."])
    assert [[(s.key, s.value) for s in found] for found in out] == [
        [("emoji", "none")], [], [("preferred_name", "Sam")]]
    assert out[0][0].stance is Stance.STANDING


def test_held_out_accuracy_does_not_fall_below_what_was_measured() -> None:
    """The figures in docs/benchmarks.md (held-out part, 0.972 / 0.903 measured), less a
    margin of a few sentences; a change that lowers them further fails."""
    rows = load(split="test")
    plain, _, _ = evaluate(rows, READER)
    assert plain.precision() >= 0.96
    assert plain.recall() >= 0.89


def test_readers_in_one_process_share_one_encoded_bank() -> None:
    # Each service start and each test stack makes its own reader; the ~700 examples are
    # encoded once per process, and the shared rows cannot be changed by any one reader.
    first, second = StatementReader(), StatementReader()
    bank = first.classifier._bank_matrix()
    assert second.classifier._bank_matrix() is bank
    assert not bank.flags.writeable
    assert first.read(["I prefer short answers."]) == second.read(["I prefer short answers."])


@pytest.mark.parametrize("message", [
    "Can you go over the bullet points again?",
    "Can you repeat the bullet points?",
    "Go through the bullet points one more time.",
    "Explain the table again.",
    "Kannst du die Stichpunkte nochmal durchgehen?",
])
def test_going_over_a_list_already_shown_states_no_format(message: str) -> None:
    # the last answer's bullets, asked about: no wish for bullets from now on
    assert [r for r in read(message) if r[1] == "format"] == []


@pytest.mark.parametrize(("message", "expected"), [
    ("Keep the bullet points.", ("style", "format", "bullets", "standing")),
    ("I like the table, keep using tables.", ("style", "format", "tables", "standing")),
    ("I prefer bullet points.", ("style", "format", "bullets", "standing")),
])
def test_a_layout_kept_or_preferred_is_still_a_format(
        message: str, expected: tuple[str, str, str, str]) -> None:
    assert expected in read(message)


@pytest.mark.parametrize("message", [
    "We prefer German for customer docs.",
    "Antworte auf Deutsch für die Protokolle.",
    "I prefer German for emails to clients.",
    "I prefer German in emails.",
    "I prefer bullet points for emails.",
])
def test_a_language_or_layout_kept_for_some_texts_is_no_answer_language_or_channel(
        message: str) -> None:
    assert [r for r in read(message) if r[1] in ("language", "primary")] == []


@pytest.mark.parametrize(("message", "expected"), [
    ("German for me please.", ("style", "language", "de", "standing")),
    ("Answer in Spanish for the rest of the chat.", ("style", "language", "es", "standing")),
    ("Réponds en anglais pour celle-ci, je dois la transférer à un collègue",
     ("style", "language", "en", "one_off")),
    ("I'd rather get updates in Slack.", ("channel", "primary", "slack", "standing")),
    ("Ping me in Slack.", ("channel", "primary", "slack", "standing")),
    ("I prefer email for updates.", ("channel", "primary", "email", "standing")),
])
def test_the_answers_language_and_the_way_to_reach_me_still_read(
        message: str, expected: tuple[str, str, str, str]) -> None:
    assert expected in read(message)


@pytest.mark.parametrize("message", [
    "Could you be a bit less verbose?",
    "Be less verbose.",
    "Less verbose please.",
    "Less verbosity please.",
    "You're too verbose.",
    "That's way too much detail for me.",
    "Too much detail.",
    "Too many details, keep it short.",
])
def test_length_said_away_asks_for_brevity(message: str) -> None:
    # "too much detail" had been read as a wish for detail, "less verbose" as nothing
    assert {r[2] for r in read(message) if r[1] == "verbosity"} == {"terse"}


@pytest.mark.parametrize("message", [
    "I want as much detail as possible.", "Not enough detail.", "Be more detailed please.",
])
def test_detail_asked_for_is_still_detail(message: str) -> None:
    assert {r[2] for r in read(message) if r[1] == "verbosity"} == {"detailed"}


@pytest.mark.parametrize(("message", "value"), [
    ("Use a professional tone.", "formal"),
    ("Please reply in a more professional tone.", "formal"),
    ("Sois plus professionnel s'il te plaît.", "formal"),
    ("Bitte professioneller formulieren.", "formal"),
    ("Don't be so professional with me.", "casual"),
])
def test_a_professional_tone_is_the_formal_register(message: str, value: str) -> None:
    assert [r[2] for r in read(message) if r[1] == "tone"] == [value]


def test_a_professional_role_is_no_tone() -> None:
    assert [r for r in read("I'm a professional photographer.") if r[1] == "tone"] == []


@pytest.mark.parametrize(("message", "expected"), [
    ("Always put the answer in a table.", ("style", "format", "tables", "declared")),
    ("Always put the answer in bullet points.", ("style", "format", "bullets", "declared")),
    ("Never put the answer in a table.", ("veto", "format=tables", "banned", "standing")),
])
def test_a_layout_the_encoder_read_as_another_key_is_read_by_its_words(
        message: str, expected: tuple[str, str, str, str]) -> None:
    assert read(message) == [expected]


@pytest.mark.parametrize("message", ["I no longer work at Google.", "I can't wait any longer."])
def test_no_longer_is_of_time_not_of_length(message: str) -> None:
    # "I no longer work at Google" had been read as a wish for shorter answers
    assert [r for r in read(message) if r[1] == "verbosity"] == []


@pytest.mark.parametrize(("message", "expected"), [
    ("I write SQL and Python.",
     [("tooling", "language", "sql", "standing"), ("tooling", "language", "python", "standing")]),
    ("I do most of my scripting in Bash.", [("tooling", "language", "bash", "standing")]),
    ("Our frontend is plain HTML and CSS.",
     [("tooling", "language", "html", "standing"), ("tooling", "language", "css", "standing")]),
])
def test_query_shell_and_markup_languages_are_tools(
        message: str, expected: list[tuple[str, str, str, str]]) -> None:
    assert read(message) == expected


@pytest.mark.parametrize("message", [
    "can you write a SQL query that finds duplicate emails in postgres",
    "Could you write a function in Go that parses JSON?",
    "the deploy is a bash script that scp's files to a single EC2 box.",
    "That's a bash one-liner.",
])
def test_a_task_or_a_thing_written_in_a_language_is_no_tool_of_the_speaker(message: str) -> None:
    assert read(message) == []


@pytest.mark.parametrize(("message", "expected"), [
    ("Hola, soy Marta, trabajo de diseñadora en Barcelona.",
     ("identity", "role", "designer", "standing")),
    ("Trabajo de enfermera en Madrid.", ("identity", "role", "nurse", "standing")),
    ("Prefiero que me hables de tú.", ("style", "tone", "casual", "standing")),
])
def test_spanish_roles_and_register(message: str, expected: tuple[str, str, str, str]) -> None:
    # "trabajo de diseñadora" had been the role "trabajo de designer"
    assert expected in read(message)
    assert not any(r[1] == "role" and r[2].startswith("trabajo") for r in read(message))


@pytest.mark.parametrize("message", ["Trabajo de noche.", "Trabajo de lunes a viernes."])
def test_working_hours_are_no_role(message: str) -> None:
    assert read(message) == []


@pytest.mark.parametrize(("message", "expected"), [
    ("Thanks! That worked. By the way, could you stop adding emojis to everything?",
     ("style", "emoji", "none")),
    ("btw can you keep answers shorter?", ("style", "verbosity", "terse")),
    ("Übrigens, kannst du bitte auf Englisch antworten?", ("style", "language", "en")),
])
def test_a_polite_request_after_an_aside_is_still_a_request(
        message: str, expected: tuple[str, str, str]) -> None:
    # "By the way, could you ...?" had been read as a question, and stated nothing
    assert expected in [r[:3] for r in read(message)]


def test_a_capability_question_after_an_aside_is_still_a_question() -> None:
    assert read("By the way, can you speak Japanese?") == []


@pytest.mark.parametrize("message", [
    "Honestly the previous answer was way too long.", "That's too long.", "Too long.",
    "Das ist viel zu lang.", "C'est un peu long.", "Es demasiado largo.",
])
def test_an_answer_said_to_be_too_long_asks_for_brevity(message: str) -> None:
    assert [r[:3] for r in read(message)] == [("style", "verbosity", "terse")]


@pytest.mark.parametrize("message", [
    "It's been a long day.", "The deploy took too long.", "I waited too long.",
])
def test_other_things_too_long_are_no_complaint_about_answers(message: str) -> None:
    assert read(message) == []


@pytest.mark.parametrize(("message", "main"), [
    ("I mostly write SQL and a bit of R.", "sql"),
    ("I code in TypeScript and occasionally Rust.", "typescript"),
    ("Je code surtout en Kotlin et un peu de Java.", "kotlin"),
    ("Programo sobre todo en TypeScript y un poco de Rust", "typescript"),
])
def test_a_side_language_does_not_replace_the_main_one(message: str, main: str) -> None:
    # a key holds one value: the side one, said last, had replaced the main one in the cache
    assert [r[2] for r in read(message) if r[1] == "language"] == [main]


def test_a_tool_of_another_key_said_as_a_side_one_is_kept() -> None:
    assert ("tooling", "infra", "docker", "standing") in read(
        "I use a bit of Docker and mostly Python.")


@pytest.mark.parametrize(("message", "expected"), [
    ("Ich bin Softwarearchitektin bei der Deutschen Bahn.",
     [("identity", "role", "software architect", "standing")]),
    ("Ich bin Projektleiter bei Siemens.",
     [("identity", "role", "project manager", "standing"),
      ("identity", "employer", "Siemens", "standing")]),
    ("Soy jefa de proyecto en Telefónica.",
     [("identity", "role", "project manager", "standing"),
      ("identity", "employer", "Telefónica", "standing")]),
])
def test_compound_and_translated_titles_and_where_they_are_held(
        message: str, expected: list[tuple[str, str, str, str]]) -> None:
    # "Softwarearchitektin" had been read as the speaker's name
    assert read(message) == expected


@pytest.mark.parametrize("message", [
    "I'm moving to Lisbon next month.", "We're relocating to Austin in the spring.",
    "Je déménage à Lyon en mars.", "Nächsten Monat ziehe ich nach Köln.",
    "Me mudo a Valencia el mes que viene.",
])
def test_a_move_still_to_come_is_not_where_the_speaker_lives(message: str) -> None:
    assert [r for r in read(message) if r[1] == "location"] == []


@pytest.mark.parametrize(("message", "city"), [
    ("I moved to Lisbon last month.", "Lisbon"), ("I just moved to Lisbon.", "Lisbon"),
    ("J'ai déménagé à Toulouse", "Toulouse"),
    ("I'm based in Lisbon, moving to Porto next year.", "Lisbon"),
])
def test_a_move_made_is_where_the_speaker_lives(message: str, city: str) -> None:
    assert [r[2] for r in read(message) if r[1] == "location"] == [city]


@pytest.mark.parametrize("message", [
    "Don't repeat the question back to me.", "Stop repeating my questions.",
])
def test_the_question_repeated_back_is_a_preamble_to_skip(message: str) -> None:
    assert read(message) == [("style", "preamble", "skip", "standing")]


def test_asking_for_the_question_again_states_nothing() -> None:
    assert read("Can you repeat the question?") == []


@pytest.mark.parametrize("message", [
    "Be brutally honest with me.", "You can be blunt.", "Be honest with me.",
])
def test_honesty_and_bluntness_asked_for_are_a_direct_tone(message: str) -> None:
    assert read(message) == [("style", "tone", "direct", "standing")]


@pytest.mark.parametrize(("message", "expected"), [
    ("To be honest, I prefer shorter answers.", [("style", "verbosity", "terse", "standing")]),
    ("Ohne Einleitung bitte, einfach direkt die Antwort",
     [("style", "preamble", "skip", "standing")]),
])
def test_honesty_said_by_the_speaker_or_the_answer_at_once_are_no_tone(
        message: str, expected: list[tuple[str, str, str, str]]) -> None:
    assert read(message) == expected


@pytest.mark.parametrize("message", ["Don't be so blunt.", "Not so friendly please."])
def test_a_manner_said_away_names_no_other(message: str) -> None:
    # "Don't be so blunt." had been read as a wish for bluntness
    assert [r for r in read(message) if r[1] == "tone"] == []


@pytest.mark.parametrize("message", ["Don't sugarcoat things.", "No sugarcoating.", "Be direct."])
def test_sugarcoating_said_away_is_the_direct_manner(message: str) -> None:
    assert read(message) == [("style", "tone", "direct", "standing")]


@pytest.mark.parametrize("message", [
    "Keep things brief please, I read on my phone.", "Keep your answers short.",
])
def test_brevity_asked_for_in_so_many_words(message: str) -> None:
    assert read(message) == [("style", "verbosity", "terse", "standing")]


def test_a_tool_dropped_is_not_the_one_used() -> None:
    # "We dropped Heroku ..." had stated Heroku as the user's cloud
    assert read("We dropped Heroku last year and moved to Fly.io.") == [
        ("tooling", "cloud", "fly.io", "standing")]


@pytest.mark.parametrize(("message", "expected"), [
    ("We abandoned Angular for React.", ("tooling", "framework", "react", "standing")),
    ("We ditched Jenkins for GitHub Actions last year.",
     ("tooling", "ci", "github-actions", "standing")),
    ("We dropped Heroku in favour of Fly.io.", ("tooling", "cloud", "fly.io", "standing")),
    ("I gave up on Vim for VS Code.", ("tooling", "editor", "vscode", "standing")),
])
def test_what_a_tool_was_dropped_for_is_the_one_used(
        message: str, expected: tuple[str, str, str, str]) -> None:
    # the whole clause had been negated by its "dropped": React was lost with Angular
    assert read(message) == [expected]


@pytest.mark.parametrize("message", ["We dropped Heroku.", "We dropped Heroku for now.",
                                     "We abandoned Angular for good.",
                                     # support dropped for a version is no tool dropped
                                     "We dropped support for Python 2.",
                                     "We dropped support for Node 14."])
def test_a_tool_dropped_for_a_while_or_for_good_is_still_dropped(message: str) -> None:
    assert [r for r in read(message) if r[0] == "tooling"] == []


@pytest.mark.parametrize(("message", "expected"), [
    ("I'm based in NYC.", ("identity", "location", "New York City", "standing")),
    ("I live in SF.", ("identity", "location", "San Francisco", "standing")),
    ("I'm a cardiologist in Milan.", ("identity", "role", "cardiologist", "standing")),
])
def test_city_abbreviations_and_jobs_by_their_ending(
        message: str, expected: tuple[str, str, str, str]) -> None:
    assert expected in read(message)


def test_a_french_la_is_no_city() -> None:
    assert read("La réponse est dans le document.") == []


@pytest.mark.parametrize(("message", "expected"), [
    ("Bitte duz mich.", ("style", "tone", "casual", "standing")),
    ("Bitte siez mich.", ("style", "tone", "formal", "standing")),
    ("Vouvoie-moi s'il te plaît.", ("style", "tone", "formal", "standing")),
    ("Je préfère qu'on se vouvoie.", ("style", "tone", "formal", "standing")),
    ("Ich mag keine langen Einleitungen.", ("style", "preamble", "skip", "standing")),
])
def test_register_verbs_and_introductions_said_away(
        message: str, expected: tuple[str, str, str, str]) -> None:
    assert read(message) == [expected]


def test_a_register_others_use_is_no_wish() -> None:
    # the wish is "tutoie-moi"; "quand on me vouvoie" says what others do
    assert read("tutoie-moi, je me sens vieux quand on me vouvoie 😅") == [
        ("style", "tone", "casual", "standing")]


@pytest.mark.parametrize("message", [
    "Please be gentle, I'm having a rough week.", "Be supportive please.",
    "Be encouraging, I'm learning.",
])
def test_gentleness_and_encouragement_are_a_friendly_tone(message: str) -> None:
    assert read(message) == [("style", "tone", "friendly", "standing")]


@pytest.mark.parametrize("message", [
    "My manager is very supportive.", "Be careful with the production database.",
    "Don't be so gentle with me.",
])
def test_other_gentleness_is_no_tone(message: str) -> None:
    assert read(message) == []


@pytest.mark.parametrize(("message", "city"), [
    ("Our team is in Bangalore but I'm in Pune.", "Pune"),
    ("Our office is in London, I work from Brighton.", "Brighton"),
    ("Unser Büro ist in Wien, ich wohne in Graz.", "Graz"),
])
def test_the_place_of_the_team_or_office_is_not_the_speakers(message: str, city: str) -> None:
    assert [r[2] for r in read(message) if r[1] == "location"] == [city]


@pytest.mark.parametrize(("message", "expected"), [
    ("When people are too formal with me I get nervous, so be casual.",
     ("style", "tone", "casual", "standing")),
    ("Where possible, use tables.", ("style", "format", "tables", "standing")),
    ("When in doubt, be brief.", ("style", "verbosity", "terse", "standing")),
])
def test_a_sentence_opened_by_when_or_where_may_ask_for_something(
        message: str, expected: tuple[str, str, str, str]) -> None:
    # each had been taken for a question by its first word, and stated nothing
    assert read(message) == [expected]


@pytest.mark.parametrize("message", [
    "When is the deadline for the tables.", "When do you usually answer emails",
    "Where are my notes in Markdown", "Quand est-ce que tu peux répondre en anglais",
])
def test_when_or_where_with_the_verb_straight_after_is_still_a_question(message: str) -> None:
    assert read(message) == []


@pytest.mark.parametrize(("message", "expected"), [
    ("We abandoned Airflow for Dagster last spring.",
     [("tooling", "orchestrator", "dagster", "standing")]),
    ("Our pipelines run on Apache Airflow.",
     [("tooling", "orchestrator", "airflow", "standing")]),
    ("We use Prefect for scheduling.", [("tooling", "orchestrator", "prefect", "standing")]),
    ("She was a school prefect.", []),  # the word, not the tool
])
def test_a_data_teams_orchestrator_is_a_tool(
        message: str, expected: list[tuple[str, str, str, str]]) -> None:
    # a new-user trial: "We abandoned Airflow for Dagster" learned nothing (neither was known)
    assert read(message) == expected


@pytest.mark.parametrize(("message", "expected"), [
    ("More verbosity please.", ("style", "verbosity", "detailed", "one_off")),
    ("More verbose please.", ("style", "verbosity", "detailed", "one_off")),
    ("Less verbosity please.", ("style", "verbosity", "terse", "one_off")),
])
def test_a_bare_comparative_is_about_this_answer_either_way(
        message: str, expected: tuple[str, str, str, str]) -> None:
    # "Less verbosity please" was one-off and "More verbosity please" standing
    assert read(message) == [expected]


def test_a_comparative_said_of_answers_in_general_stands() -> None:
    assert read("I want more examples in general.") == [
        ("style", "examples", "include", "standing")]


@pytest.mark.parametrize(("message", "expected"), [
    ("I work for the BBC.", "BBC"),
    ("Je bosse pour la SNCF.", "SNCF"),
    ("Trabajo para el Banco Santander.", "Banco Santander"),
    ("I work at The Guardian.", "The Guardian"),  # a capitalised article is the name's
    ("Ich arbeite bei der Deutschen Bahn.", "Deutsche Bahn"),  # in its nominative
    ("Je travaille chez Orange.", "Orange"),  # also a town, but "chez" names a company
])
def test_an_employer_after_an_article_or_named_like_a_town(message: str, expected: str) -> None:
    # each stated no employer
    assert ("identity", "employer", expected, "standing") in read(message)


@pytest.mark.parametrize("message", ["I work at home.", "I work for the government.",
                                     "I'm at the office.", "I work at Paris."])
def test_no_employer_in_a_place_or_a_common_noun(message: str) -> None:
    assert [r for r in read(message) if r[1] == "employer"] == []


@pytest.mark.parametrize("message", ["I don't need the pleasantries, just the answer.",
                                     "Spare me the small talk.", "No need for pleasantries."])
def test_pleasantries_not_needed_skip_the_preamble(message: str) -> None:
    # "I don't need the pleasantries" stated nothing, "I don't need the intro" did
    assert read(message) == [("style", "preamble", "skip", "standing")]


@pytest.mark.parametrize(("message", "expected"), [
    ("I hate bullet points, write in prose.", ("style", "format", "prose", "standing")),
    ("Write in prose.", ("style", "format", "prose", "standing")),
    ("Schreib auf Deutsch.", ("style", "language", "de", "standing")),
])
def test_writing_in_a_way_is_no_task_of_this_answer(
        message: str, expected: tuple[str, str, str, str]) -> None:
    # "write" was read as a task, so the style was this answer's alone ("Answer in German"
    # stood)
    assert read(message) == [expected]


@pytest.mark.parametrize(("message", "banned"), [
    ("Please don't use markdown headers, they look weird in Slack.", "format=headings"),
    ("No markdown tables please.", "format=tables"),
    ("Never use markdown code blocks.", "format=code-blocks"),
    ("Don't use markdown.", "format=markdown"),
    ("No markdown formatting please.", "format=markdown"),
])
def test_markdown_before_a_thing_banned_is_its_adjective(message: str, banned: str) -> None:
    # "don't use markdown headers" had banned Markdown as a whole beside the headings
    assert read(message) == [("veto", banned, "banned", "standing")]


@pytest.mark.parametrize("message", [
    "Could you stop ending every message with a question?", "No follow-up questions please.",
    "Don't end your answers with a question.", "Keine Rückfragen bitte.",
    "Pas de questions de suivi.",
])
def test_the_closing_question_is_a_thing_a_user_bans(message: str) -> None:
    # a new-user round: "Could you stop ending every message with a question?" stated nothing
    assert read(message) == [("veto", "content=follow-up-questions", "banned", "standing")]


@pytest.mark.parametrize("message", ["I have a follow-up question about step 2.",
                                     "Can you answer my follow-up question?"])
def test_a_follow_up_question_of_the_users_bans_nothing(message: str) -> None:
    assert read(message) == []


@pytest.mark.parametrize(("message", "expected"), [
    ("I'm an account executive at Salesforce, mostly covering the Nordics.",
     [("identity", "role", "account executive", "standing"),
      ("identity", "employer", "Salesforce", "standing")]),
    ("I'm a sales rep at HubSpot.", [("identity", "role", "sales representative", "standing"),
                                     ("identity", "employer", "HubSpot", "standing")]),
])
def test_the_sales_trades_titles_are_roles(
        message: str, expected: list[tuple[str, str, str, str]]) -> None:
    # "account executive" was no role, so nothing at all was read
    assert read(message) == expected


@pytest.mark.parametrize(("message", "expected"), [
    ("My name's Jo, short for Joanna.", [("identity", "name", "Jo", "standing")]),
    ("Ich heiße Max, kurz für Maximilian.", [("identity", "name", "Max", "standing")]),
    ("No more than three bullet points, please.", []),
    ("At most 5 bullets.", []),
    ("Maximum three bullet points.", []),
    ("Max 3 bullet points.", []),
    # a name's long form only after the speaker's name: these are lengths
    ("Please keep answers short for Python questions.",
     [("style", "verbosity", "terse", "standing")]),
    ("Call me Alex, short for Alexandra, and keep it short.",
     [("identity", "preferred_name", "Alex", "standing"),
      ("style", "verbosity", "terse", "standing")]),
])
def test_a_names_long_form_and_a_cap_on_a_count_say_no_style(
        message: str, expected: list[tuple[str, str, str, str]]) -> None:
    # "short for Joanna" was a wish for short answers; "no more than three bullet points" one
    # for prose
    assert read(message) == expected


@pytest.mark.parametrize(("message", "home"), [
    ("J'habite à Lyon mais je travaille à Genève.", "Lyon"),
    ("I live in Oakland but work in San Francisco.", "Oakland"),
    ("Ich wohne in Potsdam und arbeite in Berlin.", "Potsdam"),
    ("I live and work in Berlin.", "Berlin"),  # one clause, one place
    ("I work in London.", "London"),  # nothing said of a home
])
def test_where_the_speaker_works_gives_way_to_where_they_live(message: str, home: str) -> None:
    # both places were stated, and the workplace, said last, replaced the home
    assert [r for r in read(message) if r[1] == "location"] == [
        ("identity", "location", home, "standing")]


@pytest.mark.parametrize(("message", "expected"), [
    ("Antworte bitte förmlich.", ("style", "tone", "formal", "standing")),
    ("Bitte antworten Sie förmlich.", ("style", "tone", "formal", "standing")),
    ("Réponds de manière formelle.", ("style", "tone", "formal", "standing")),
    ("Please answer formally.", ("style", "tone", "formal", "standing")),
    # "so" before the one word it intensifies joins no clause: "formally" alone was formal
    ("Don't answer so formally.", ("style", "tone", "casual", "standing")),
])
def test_the_manner_of_answering_is_the_register(
        message: str, expected: tuple[str, str, str, str]) -> None:
    # each stated nothing, and the last one the opposite
    assert read(message) == [expected]


@pytest.mark.parametrize("message", ["I'm tired, so be brief.", "I'm tired so keep it short."])
def test_so_still_joins_a_reason_and_a_wish(message: str) -> None:
    assert read(message) == [("style", "verbosity", "terse", "standing")]


@pytest.mark.parametrize(("message", "expected"), [
    ("No walls of text.", [("style", "verbosity", "terse", "standing")]),
    ("Please text me instead of calling.", [("channel", "primary", "sms", "standing")]),
    ("I'm Dr. Amara Okafor, a pediatrician in Lagos.",
     [("identity", "name", "Dr. Amara Okafor", "standing"),
      ("identity", "role", "pediatrician", "standing"),
      ("identity", "location", "Lagos", "standing")]),
    ("Please avoid acronyms.", [("veto", "content=jargon", "banned", "standing")]),
    ("Bitte keine Abkürzungen.", [("veto", "content=jargon", "banned", "standing")]),
])
def test_a_fourth_round_of_first_messages(
        message: str, expected: list[tuple[str, str, str, str]]) -> None:
    # "walls of text" was a text message (so a channel, and nothing), the role after the
    # name and its town was missed, acronyms were no jargon
    assert read(message) == expected


@pytest.mark.parametrize(("message", "expected"), [
    ("I like terse answers with code first.", [("style", "code", "code-first", "standing"),
                                               ("style", "verbosity", "terse", "standing")]),
    ("short answers in bullet points please", [("style", "verbosity", "terse", "standing"),
                                               ("style", "format", "bullets", "standing")]),
    ("Short answers, no tables.", [("style", "verbosity", "terse", "standing"),
                                   ("veto", "format=tables", "banned", "standing")]),
])
def test_brevity_and_another_key_in_one_clause_are_both_read(
        message: str, expected: list[tuple[str, str, str, str]]) -> None:
    # a clause was read as one key: the brevity, or the layout beside it, was lost
    assert read(message) == expected


@pytest.mark.parametrize(("message", "zone"), [
    ("I'm a freelance translator working from Lisbon, mostly EN to PT.", None),
    ("I translate PT to EN.", None),
    ("I'm on PT.", "America/Los_Angeles"),
    ("I work in PT hours, EN to DE mostly.", "America/Los_Angeles"),
])
def test_a_pair_of_language_codes_is_no_time_zone(message: str, zone: str | None) -> None:
    # "EN to PT" had made a translator in Lisbon live on Pacific Time
    zones = [r[2] for r in read(message) if r[1] == "timezone"]
    assert zones == ([zone] if zone else [])


@pytest.mark.parametrize(("message", "expected"), [
    # a wish after a comma and a conjunction ("et sois bref") was left to the encoder, which
    # read nothing
    ("Réponds-moi en français s'il te plaît, et sois bref.",
     [("style", "language", "fr", "standing"), ("style", "verbosity", "terse", "standing")]),
    ("Responde en español, y sé breve.",
     [("style", "language", "es", "standing"), ("style", "verbosity", "terse", "standing")]),
    # things in general, not this answer
    ("Could you keep things short? I read on my phone between batches.",
     [("style", "verbosity", "terse", "standing")]),
    ("Can you keep everything brief?", [("style", "verbosity", "terse", "standing")]),
    ("could you keep it short?", [("style", "verbosity", "terse", "one_off")]),
    ("Could you keep things short in this reply?",
     [("style", "verbosity", "terse", "one_off")]),
    ("Please drop the formal tone.", [("style", "tone", "casual", "standing")]),
    # what the agent did is no wish of the user's
    ("You used German again, please answer in English.",
     [("style", "language", "en", "standing")]),
    ("You keep using tables, I hate that.", []),
    # one use of a tool banned is a tool rule's business, not a ban on the tool
    ("Never run terraform apply on prod.", []),
    ("Don't git push --force to main.", []),
    ("Never use vim.", [("veto", "tool=vim", "banned", "standing")]),
    ("Be careful with the database.", []),
])
def test_a_fifth_round_of_first_messages(
        message: str, expected: list[tuple[str, str, str, str]]) -> None:
    assert read(message) == expected


@pytest.mark.parametrize(("message", "expected"), [
    # GeoNames lists "Google" among Topeka's names: it was read as a city, so no employer
    ("Correction: I work at Google now, not Meta.",
     [("identity", "employer", "Google", "standing")]),
    ("I live in Topeka.", [("identity", "location", "Topeka", "standing")]),
    # "I joined X" names where the speaker works, unless X is a tool
    ("I'm no longer at Shopify; I joined Stripe in March.",
     [("identity", "employer", "Stripe", "standing")]),
    ("I recently joined Contoso.", [("identity", "employer", "Contoso", "standing")]),
    ("I joined Slack yesterday.", []),
    ("I joined Twitter in 2009.", []),
    ("I've joined Microsoft Teams.", []),
    ("I joined Microsoft in May.", [("identity", "employer", "Microsoft", "standing")]),
    ("I joined the call late.", []),
    ("Sam joined Google last week.", []),
])
def test_where_the_speaker_works_now(message: str,
                                     expected: list[tuple[str, str, str, str]]) -> None:
    assert read(message) == expected


@pytest.mark.parametrize(("message", "expected"), [
    # the languages a user speaks, listed, ask for none of them (the last one listed was taken)
    ("I speak English, French and a bit of Italian.", []),
    ("Languages: English (native), Spanish (fluent).", []),
    ("Sprachen: Deutsch (Muttersprache), Englisch (fließend)", []),
    # a frame of its own still asks
    ("I speak German, but answer in English.", [("style", "language", "en", "standing")]),
    ("Ich spreche Deutsch und Englisch, antworte bitte auf Deutsch.",
     [("style", "language", "de", "standing")]),
    ("Language: German", [("style", "language", "de", "standing")]),
    ("English please.", [("style", "language", "en", "standing")]),
])
def test_a_list_of_languages_spoken_is_no_answer_language(
        message: str, expected: list[tuple[str, str, str, str]]) -> None:
    assert read(message) == expected


def test_moi_c_est_names_the_speaker() -> None:
    """"moi c'est X" is how a French speaker says their name."""
    found = read("Salut, moi c'est Chloé, prof de maths à Toulouse.")
    assert ("identity", "name", "Chloé", "standing") in found
    assert ("identity", "location", "Toulouse", "standing") in found
    assert read("Moi c'est Chloé.") == [("identity", "name", "Chloé", "standing")]


@pytest.mark.parametrize(("message", "expected"), [
    # how to address the user is for good, even beside a task
    ("Tutoie-moi et explique simplement.", [("style", "tone", "casual", "standing")]),
    ("Duz mich und erklär es kurz.",
     [("style", "tone", "casual", "standing"), ("style", "verbosity", "terse", "one_off")]),
])
def test_a_register_beside_a_task_is_for_good(
        message: str, expected: list[tuple[str, str, str, str]]) -> None:
    assert read(message) == expected


@pytest.mark.parametrize(("message", "expected"), [
    ("Correction: my team is Payments, not Billing.",
     [("identity", "team", "payments", "standing")]),
    ("Our team is called Radar.", [("identity", "team", "radar", "standing")]),
    ("My team is Data Platform.", [("identity", "team", "data platform", "standing")]),
    ("my team is payments", [("identity", "team", "payments", "standing")]),
    ("My team is small.", []),  # no team's name
    ("My team is the best.", []),
])
def test_my_team_is_names_the_team(message: str,
                                   expected: list[tuple[str, str, str, str]]) -> None:
    assert read(message) == expected


@pytest.mark.parametrize(("message", "expected"), [
    ("I'm Omar, SRE at Tidewater in Lisbon.",
     [("identity", "name", "Omar"), ("identity", "role", "sre"),
      ("identity", "employer", "Tidewater"), ("identity", "location", "Lisbon")]),
    ("I'm a VP of Sales at Oracle.",
     [("identity", "role", "vp of sales"), ("identity", "employer", "Oracle")]),
    ("I'm Dana, Head of Product at Linear.",
     [("identity", "name", "Dana"), ("identity", "role", "head of product"),
      ("identity", "employer", "Linear")]),
    ("I'm the chief of staff at Notion.",
     [("identity", "role", "chief of staff"), ("identity", "employer", "Notion")]),
    ("I lead the data platform team at Klarna.",
     [("identity", "team", "data platform"), ("identity", "employer", "Klarna"),
      ("identity", "role", "team lead")]),
    ("I manage the mobile team at Spotify.",
     [("identity", "team", "mobile"), ("identity", "employer", "Spotify"),
      ("identity", "role", "manager")]),
    ("I'm a staff engineer leading the infra team.",
     [("identity", "role", "engineer"), ("identity", "team", "infra")]),
    ("I work in marketing at Nike.",
     [("identity", "team", "marketing"), ("identity", "employer", "Nike")]),
    ("hey, Maria here. I work in sales.",
     [("identity", "name", "Maria"), ("identity", "team", "sales")]),
    ("I'm on our data team at Zalando.",
     [("identity", "team", "data"), ("identity", "employer", "Zalando")]),
    ("I'm leading our mobile team.", [("identity", "team", "mobile"),
                                      ("identity", "role", "team lead")]),
    ("Ich bin Jonas, Produktmanager bei Zalando in Berlin.",
     [("identity", "name", "Jonas"), ("identity", "role", "product manager"),
      ("identity", "employer", "Zalando"), ("identity", "location", "Berlin")]),
])
def test_what_the_trial_under_load_found(message: str,
                                          expected: list[tuple[str, str, str]]) -> None:
    """A role without its article beside the speaker's name; titles over a department; the
    role of whoever leads or manages a team; a team said as "our" or "my"; a department
    worked in; a name introduced as "Maria here" (its clause has no other capital, so the
    cheap test passed it by); "Dana", which `langcodes` also knows as Esperanto for Danish."""
    assert [s[:3] for s in read(message)] == expected


@pytest.mark.parametrize("message", [
    "Head of the line at the bakery.",
    "I don't lead the payments team anymore.",
    "Anyway, nothing here.",
    "Ok, done here.",
    "Can you sign this off as Marco, Head of Operations? My boss asked me to draft it.",
    "Chef at heart, I cook every night.",
])
def test_what_those_readings_do_not_take_for_a_role_or_a_name(message: str) -> None:
    assert not [s for s in read(message) if s[1] in ("role", "name")]


def test_the_role_of_leading_a_team_is_implied_so_it_never_replaces_one_said() -> None:
    """One-off: evidence to be scored, never a statement that replaces "sre" said before."""
    assert read("I lead the data platform team at Klarna.")[-1] == (
        "identity", "role", "team lead", "one_off")
    assert [s for s in read("I'm an SRE and I lead the platform team.") if s[1] == "role"] == [
        ("identity", "role", "sre", "standing")]


def test_whoever_runs_a_team_may_be_its_lead_or_its_hands() -> None:
    """"I run the analytics team" names the team, and no role (the labelled corpus's
    reading)."""
    assert [s[:3] for s in read("I run the analytics team at Litware.")] == [
        ("identity", "team", "analytics"), ("identity", "employer", "Litware")]


@pytest.mark.parametrize(("message", "expected"), [
    # "so many" is a quantity, not "so" joining two clauses; the standing wish of the next
    # sentence is kept over the one-off of the question
    ("Can you stop using so many bullet points? I prefer prose.",
     [("style", "format", "prose", "standing")]),
    ("you use so many emojis, tone it down", [("style", "emoji", "none", "standing")]),
    ("Kannst du bitte aufhören, so viele Emojis zu benutzen?",
     [("style", "emoji", "none", "one_off")]),
    ("Send me updates on Slack, not email.", [("channel", "primary", "slack", "standing")]),
    ("Keep me posted on Telegram.", [("channel", "primary", "telegram", "standing")]),
    ("I'm allergic to jargon, explain acronyms.",
     [("veto", "content=jargon", "banned", "standing")]),
    # within one sentence the first saying's scope holds for the rest
    ("no intro for this one, straight to the steps", [("style", "preamble", "skip", "one_off")]),
])
def test_what_a_trial_of_everyday_messages_found(
        message: str, expected: list[tuple[str, str, str, str]]) -> None:
    assert read(message) == expected


def test_so_many_said_with_pleasure_asks_for_no_less() -> None:
    assert ("style", "emoji", "none") not in [
        s[:3] for s in read("I love that you use so many emojis")]


@pytest.mark.parametrize("message", [
    "I'm currently learning Rust.", "I'm picking up some Go.", "Ich lerne gerade Rust.",
    "I want to learn Rust in my spare time."])
def test_a_language_being_learned_is_not_the_one_worked_in(message: str) -> None:
    """Read as the user's language, "learning Rust" turned the examples of someone who works
    in Python into Rust."""
    assert not [s for s in read(message) if s[0] == "tooling"]


def test_what_is_worked_in_beside_what_is_learned_is_read() -> None:
    assert read("We use Python; I'm learning Rust on the side.") == [
        ("tooling", "language", "python", "standing")]
    assert read("I learn best from examples in Python.") == [
        ("tooling", "language", "python", "standing")]


@pytest.mark.parametrize(("message", "stance"), [
    ("Email me the report when it's ready.", "one_off"),
    ("Text me when the build finishes.", "one_off"),
    ("Send me the summary on Slack.", "one_off"),
    ("Send me updates on Slack, not email.", "standing"),
    ("Text me on WhatsApp whenever something breaks.", "standing"),
    ("Email me when possible.", "standing"),
])
def test_a_channel_asked_for_one_delivery_is_evidence_not_the_channel_for_everything(
        message: str, stance: str) -> None:
    [said] = read(message)
    assert said[:2] == ("channel", "primary") and said[3] == stance
