"""The kinds of tool a sentence may name ("E-Mails", "the browser", "el navegador") and what a
called tool's name then contains: how tool memory tells an edict about a tool's work from one
about answers, and which of a turn's tools a rule is about (services.tool_memory.capture).
"""

from __future__ import annotations

import re

_TOKEN_RE = re.compile(r"[^\W_]+")
#: what a sentence may call a tool -> what the called tool's name then contains. "sudo" and
#: "command line" are shell words: nothing but a shell runs either. "command" alone is not one
#: (bots and editors have commands too), nor "event" a calendar word ("in any event").
NOUNS: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    (("email", "emails", "e mail", "e mails", "mail", "mails", "inbox",
      "correo", "correos", "courriel", "courriels"), ("mail",)),
    (
        ("shell", "shells", "terminal", "console", "command line", "commandline", "cli", "sudo",
         "bash", "zsh", "powershell", "consola", "konsole", "kommandozeile",
         "ligne de commande", "línea de comandos"),
        ("shell", "bash", "exec", "terminal", "cmd"),
    ),
    (
        ("browser", "browse", "browsing", "web", "website", "websites", "webpage", "webpages",
         "web page", "web pages", "url", "urls", "internet", "navegador", "navigateur"),
        ("browser", "web", "http", "fetch", "url", "crawl", "scrape"),
    ),
    (("slack", "dm", "dms", "direct message", "direct messages"), ("slack",)),
    (
        ("calendar", "calendars", "meeting", "meetings", "invite", "invites", "appointment",
         "appointments", "calendario", "reunión", "reuniones", "kalender", "besprechung",
         "besprechungen", "termin", "termine", "calendrier", "réunion", "réunions",
         "rendez vous"),
        ("calendar", "gcal", "meeting", "schedul"),
    ),
)
PADDED_NOUNS = tuple(
    (tuple(f" {noun} " for noun in nouns), fragments) for nouns, fragments in NOUNS
)


def words(text: str) -> str:
    """`text` as its lower-case words between single spaces, padded: " send email sarah "."""
    return " " + " ".join(_TOKEN_RE.findall(text.lower())) + " "


def names_a_kind_of_tool(text: str) -> bool:
    """Whether `text` names a kind of tool ("E-Mails", "the browser", "el navegador")."""
    padded = words(text)
    return any(noun in padded for nouns, _ in PADDED_NOUNS for noun in nouns)
