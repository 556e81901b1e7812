"""How a facet reads to a person, and the question that asks them to confirm it.

`describe` is the second-person clause ("you prefer short answers") that PROFILE.md's "Not yet
sure" block and the prompt's confirmation section show. `confirmation_question` wraps it as
"Should I remember that you prefer short answers?". The clause is written so that its
first-person form ("I prefer short answers") is a plain statement the statement reader
understands: when an agent asks the question and the user answers yes, the producers read the
agent's question back into the facet it proposes, and the user's answer settles it.
"""

from __future__ import annotations

from habitus.vocabulary.languages import language_name
from habitus.vocabulary.tools import categories

_STYLE: dict[tuple[str, str], str] = {
    ("verbosity", "terse"): "you prefer short answers",
    ("verbosity", "detailed"): "you prefer detailed answers",
    ("preamble", "skip"): "you want answers without an introduction",
    ("format", "tables"): "you prefer tables",
    ("format", "bullets"): "you prefer bullet points",
    ("format", "prose"): "you prefer answers in prose, without bullet points",
    ("code", "code-first"): "you prefer code before explanations",
    ("code", "diff"): "you prefer changes shown as diffs",
    ("examples", "include"): "you want examples in answers",
    ("emoji", "none"): "you want no emojis in answers",
    ("emoji", "ok"): "you are fine with emojis in answers",
    ("tone", "formal"): "you prefer a formal tone",
    ("tone", "casual"): "you prefer a casual tone",
    ("tone", "friendly"): "you prefer a friendly tone",
    ("tone", "direct"): "you prefer a direct tone",
    ("units", "metric"): "you want metric units",
    ("units", "imperial"): "you want imperial units",
    ("clock", "24h"): "you want times in 24-hour format",
    ("clock", "12h"): "you want times in 12-hour format",
}
_IDENTITY = {
    "name": "your name is {v}",
    "preferred_name": "you go by {v}",
    "employer": "you work at {v}",
    "team": "you are on the {v} team",
    "role": "you work as {a} {v}",
    "location": "you are based in {v}",
    "timezone": "your time zone is {v}",
    "email": "your email address is {v}",
    "pronouns": "your pronouns are {v}",
}
_TOOL_NAMES = {"postgres": "Postgres", "vscode": "VS Code", "macos": "macOS", "node": "Node.js",
               "c++": "C++", "c#": "C#", "aws": "AWS", "gcp": "GCP", "next.js": "Next.js",
               "fastapi": "FastAPI", "mongodb": "MongoDB", "mysql": "MySQL",
               "typescript": "TypeScript", "javascript": "JavaScript", "npm": "npm",
               "pnpm": "pnpm", "uv": "uv", "pip": "pip"}
_CHANNELS = {"sms": "text message", "email": "email", "phone": "phone", "teams": "Teams",
             "whatsapp": "WhatsApp"}


#: how the things a veto bans on answers read (habitus.vocabulary.keys.VETO_THINGS)
_VETOED = {"nested-bullets": "nested bullet lists", "markdown": "Markdown",
           "long-replies": "long replies",
           "follow-up-questions": "closing follow-up questions"}


def tool_name(tool: str) -> str:
    """A catalogue tool as people write it ("postgres" -> "Postgres")."""
    return _TOOL_NAMES.get(tool, tool.capitalize() if tool.isalpha() else tool)


def value_text(facet_class: str, key: str, value: str) -> str:
    """The value as a person reads it: "German" for `style/language=de`."""
    if facet_class == "style" and key == "language":
        return language_name(value)
    if facet_class == "tooling":
        return tool_name(value)
    return value


def describe(facet_class: str, key: str, value: str) -> str:
    """A second-person clause saying what the facet holds ("you prefer short answers")."""
    if facet_class == "style":
        if key == "language":
            return f"you want answers in {language_name(value)}"
        return _STYLE.get((key, value), f"you prefer {key} {value}")
    if facet_class == "identity":
        template = _IDENTITY.get(key, f"your {key.replace('_', ' ')} is {{v}}")
        article = "an" if value[:1].lower() in "aeiou" else "a"
        return template.format(v=value, a=article)
    if facet_class == "tooling":
        if len(categories(value)) > 1:  # "Bun as your package manager", not as the runtime
            return f"you use {tool_name(value)} as your {key.replace('_', ' ')}"
        return f"you use {tool_name(value)}"
    if facet_class == "veto":
        kind, _, thing = key.partition("=")
        if kind in ("format", "content", "style"):  # a way of answering, not a tool
            return f"you don't want {_VETOED.get(thing, thing.replace('-', ' '))} in answers"
        return f"you never want {tool_name(thing)} suggested"
    if facet_class == "channel":
        return f"you prefer to be reached by {_CHANNELS.get(value, value.capitalize())}"
    return f"your goal is: {value}"


def confirmation_question(facet_class: str, key: str, value: str) -> str:
    """The question an agent may ask to confirm a facet it is not yet sure of."""
    return f"Should I remember that {describe(facet_class, key, value)}?"


def first_person(clause: str) -> str:
    """The user's own wording of a second-person clause: "you prefer X" -> "I prefer X"."""
    words = clause.split(" ")
    swap = {"you": "I", "your": "my", "You": "I", "Your": "My", "yours": "mine"}
    out = [swap.get(w, w) for w in words]
    text = " ".join(out)
    return text.replace("I are ", "I am ")
