"""The canonical vocabulary of facets: the keys Habitus learns, their values' canonical forms,
and how each reads to a person.

Every deterministic producer emits only what `check` accepts; the LLM extractor's open keys
pass `open_key_problem`; the stability detector, the renderer and the docs describe facets with
`describe`, `value_text` and `confirmation_question`. Values come from gazetteers rather than
from the sentence: a language through `langcodes` (BCP 47), a city through the GeoNames
gazetteer, a time zone through `zoneinfo` (IANA), a tool from the curated catalogue.
"""

from habitus.vocabulary.keys import (
    BANNED,
    KEYS,
    VETO_THINGS,
    KeySpec,
    check,
    in_vocabulary,
    open_key_problem,
)
from habitus.vocabulary.languages import canonical_language, language_name
from habitus.vocabulary.phrasing import (
    confirmation_question,
    describe,
    first_person,
    value_text,
)
from habitus.vocabulary.places import City, canonical_city, find_city
from habitus.vocabulary.timezones import canonical_timezone
from habitus.vocabulary.tools import canonical_tool, categories

__all__ = [
    "BANNED", "KEYS", "VETO_THINGS", "City", "KeySpec", "canonical_city", "canonical_language",
    "canonical_timezone", "canonical_tool", "categories", "check", "confirmation_question",
    "describe", "find_city", "first_person", "in_vocabulary", "language_name",
    "open_key_problem", "value_text",
]
