"""Answer languages as BCP 47 tags, from a language's name in any language `langcodes` knows.

"German", "Deutsch", "allemand", "alemán" and "de" are all `de`: a preference is stored once
whatever language the user stated it in. `langcodes` also knows hundreds of small languages
whose names collide with ordinary words ("Shor" for "short"), so a name only counts when the
language it names is spoken by at least `MIN_SPEAKERS` people: nobody asks an assistant to
answer in a language with a few thousand speakers by writing its name in passing.
"""

from __future__ import annotations

from functools import lru_cache

import langcodes

#: a language must have at least this many speakers for its name to be read as a language
MIN_SPEAKERS = 5_000_000
#: names people use that `langcodes` does not resolve to the tag they mean
_ALIASES = {
    "mandarin": "zh", "cantonese": "yue", "castellano": "es", "castilian": "es",
    "farsi": "fa", "brazilian": "pt-BR", "portugues": "pt", "deutsch": "de",
}


@lru_cache(maxsize=4096)
def canonical_language(text: str) -> str | None:
    """The BCP 47 tag `text` names ("German" -> "de"), or None when it names no major language.

    Accepts a language's name in English or in another language, or a tag ("de", "pt-BR").
    """
    name = " ".join(text.split()).strip(" .,;:!?").lower()
    if not name or len(name) > 40:
        return None
    if name in _ALIASES:
        return _ALIASES[name]
    if len(name) <= 8 and langcodes.tag_is_valid(name) and is_language_tag(
            langcodes.standardize_tag(name)):
        return langcodes.standardize_tag(name)  # a tag first: "en" is English, not "En"
    try:
        found = langcodes.find(name)
    except LookupError:
        return None
    tag = langcodes.standardize_tag(found.to_tag())
    base = langcodes.Language.get(tag)
    if base.speaking_population() < MIN_SPEAKERS:
        return None
    return tag


def is_language_tag(value: str) -> bool:
    """Whether `value` is a canonical tag of a major language (what `style/language` holds)."""
    try:
        tag = langcodes.standardize_tag(value)
    except ValueError:
        return False
    return tag == value and langcodes.tag_is_valid(value) and (
        langcodes.Language.get(value).speaking_population() >= MIN_SPEAKERS)


@lru_cache(maxsize=4096)
def is_written_name(word: str) -> bool:
    """Whether `word` is how English, German, French or Spanish write a major language's name
    ("inglés", "anglais", "Englisch"): lower-case words are read as languages only then, so
    "more" (Mossi) or "short" (Shor) never are."""
    tag = canonical_language(word)
    if tag is None:
        return False
    language = langcodes.Language.get(tag)
    folded = word.lower()
    return any(str(language.display_name(lang)).lower() == folded
               for lang in ("en", "de", "fr", "es"))


@lru_cache(maxsize=4096)
def names_language(word: str) -> bool:
    """Whether `word` names a language, or its people, in words ("German", "Deutsch",
    "Deutscher", "Farsi"), never by a code: "Ben" and "Dan" are people, though ISO 639 codes
    of Bengali and Danish.

    The word must begin with the language's name in English, German, French, Spanish or the
    language itself: `langcodes` also knows every language's name in Esperanto and many
    more, where "dana" is Danish, and Dana is a person's name."""
    low = word.lower()
    if low in _ALIASES or is_written_name(low):
        return True
    tag = canonical_language(low)
    if tag is None or langcodes.tag_is_valid(low):
        return False
    language = langcodes.Language.get(tag)
    return any(low.startswith(str(language.display_name(lang)).lower())
               for lang in ("en", "de", "fr", "es", tag))


def language_name(tag: str) -> str:
    """The English name of a tag, for prompts and PROFILE.md ("de" -> "German")."""
    return str(langcodes.Language.get(tag).display_name())
