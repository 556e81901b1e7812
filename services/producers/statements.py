"""Producer 5 (fast path): preferences the user states in so many words, learned without an LLM.

"Keep it short", "no preamble", "answer in German", "don't use lodash", "I work on the billing
team", "we use Postgres", "reach me on Slack": the common plain statements are cheap to
recognise and they are Explicit evidence, the strongest cue family, so the rules are built to
miss rather than to invent. A sentence yields nothing when it is not the user stating their own
preference:

- questions ("should I use pnpm?"); a polite request phrased as a question ("can you keep it
  short?", "could you answer in German?") IS an instruction and is read without its "can you";
- quotations: text inside quotation marks, inline code, code fences and `>` blockquote lines is
  masked before anything is matched (a quoted object makes its statement yield nothing);
- hypotheticals and intentions ("if I used pnpm", "suppose we were on Rust", "I might switch to
  yarn", "I'll be in Berlin"); the polite hedges "if possible", "if you can" are not conditions;
- other people ("my manager uses Windows", "he works at Acme", "Sarah says no preamble"): a
  sentence with a third-person subject of a stating verb is dropped whole, since its other
  clauses are as likely to be about that person;
- negations that assert nothing ("I don't know what to use", "I'm not in Berlin right now",
  "don't call me Ada");
- past narrative ("I used to work at Acme", "we used to use yarn"): nothing, because it says
  where the user was, not what they want now; only "I stopped using X", "I no longer use X"
  and "I don't use X (anymore)" about a tool are vetoes;
- agent-tool edicts ("never email Sarah", "don't run shell commands with sudo", "no meetings on
  Friday"): rules for the agent's tools, which another component owns; an edict whose object is
  a person (a name after "mention"/"include"/"add", a pronoun, an e-mail address, "my ...") or
  an agent tool (email, calendar, shell, sudo, ...) is no veto.

Standing: a statement is standing when its sentence is framed as a standing rule ("from now on",
"always", "going forward", "in future", "by default", "remember that", "please remember",
"never ... again") or addresses all answers in general ("all replies", "in every answer", or any
mention of "answers", "replies" or "responses" in the plural). Every statement of a sentence
shares the sentence's framing. Plain "never suggest X" is not standing by itself (only "never
... again" is): the detector's scoring gives the veto its weight, the frame only says the user
said so for good.

Canonical forms: keys are short ASCII slugs or canonical tool names, built from whole words only
(a key that would have to be cut mid-word is dropped instead). Names (a person's name, preferred
name, location, employer, team) keep the user's capitalisation; time zones are kept as written;
every other value is canonical lower-case. Tools come from a small table by category
(`tooling/database=postgres`); a tool outside it is `tooling/<slug>=uses`. Bun is filed as a
runtime, never as a package manager, so "we use Bun" is one facet.

Deliberately narrow, to stay precise: places, employers and "call me" names must be
capitalised ("I'm in a meeting" is no location); "I'm a X" is a role only when X ends in a role
noun ("data engineer", not "big fan"); a bare "no X" must be the whole clause and X no
interjection ("no problem", "no worries, ..."); "don't use so many bullets" asks for fewer, not
none; one sentence naming two values of one style, identity or channel key ("keep it short but
more detail on X") states neither; a sentence over MAX_SENTENCE_CHARS is pasted text and skipped.

Everything here is a pure function of the message, with every pattern compiled at import.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from habitus.events.domain import CueFamily, FacetClass
from services.producers.candidates import (
    EXPLICIT_STATEMENT,
    Candidate,
    is_valid_key,
    slugify,
    squash_spaces,
)

CONFIDENCE = 0.9
#: a key longer than this is dropped whole words from the end, never cut inside a word
KEY_CHARS = 48
#: an object of more than this many words is no plain "don't use X"; the statement is dropped
MAX_ITEM_WORDS = 3
MAX_NAME_WORDS = 4
#: a "sentence" longer than this is pasted text (a log, a document), not a plain statement
MAX_SENTENCE_CHARS = 400

STYLE = FacetClass.STYLE.value
VETO = FacetClass.VETO.value
IDENTITY = FacetClass.IDENTITY.value
TOOLING = FacetClass.TOOLING.value
CHANNEL = FacetClass.CHANNEL.value

#: keys of which one sentence can only mean one value: two values in one sentence are ambiguous
#: ("less fluff but more detail") and both are dropped
_SINGLE_VALUED = {STYLE, IDENTITY, CHANNEL}


@dataclass(frozen=True, slots=True)
class Statement:
    """One preference the user stated: "<facet_class>/<key>=<value>", and where it was said."""

    facet_class: str
    key: str
    value: str
    sentence: str
    standing: bool


Fact = tuple[int, str, str, str]  # (position in the sentence, class, key, value)

#: the value of every veto; its key says what kind of thing is banned: `format=nested-bullets`,
#: `tool=jquery`, `content=disclaimers`, `practice=global-state` (the shape the correction
#: heuristics use too, so an explicit "no nested bullets" and three corrections are one facet)
BANNED = "banned"
_FORMAT_THINGS = frozenset(
    "nested-bullets bullets bullet-points tables emoji emojis markdown headings headers "
    "code-blocks numbered-lists lists bold italics all-caps caps exclamation-marks".split())
_CONTENT_THINGS = frozenset(
    "disclaimers apologies caveats jargon filler buzzwords fluff small-talk".split())


def veto_key(thing: str, *, known_tool: bool = False) -> str:
    """`<kind>=<thing>` for a banned thing: a format, some content, a tool, or a practice."""
    if thing in _FORMAT_THINGS:
        return f"format={thing}"
    if thing in _CONTENT_THINGS:
        return f"content={thing}"
    if known_tool or "-" not in thing:
        return f"tool={thing}"
    return f"practice={thing}"

# --------------------------------------------------------------------------- tables

_TOOL_TABLE: dict[str, dict[str, tuple[str, ...]]] = {
    "package_manager": {
        "npm": (), "pnpm": (), "yarn": (), "pip": ("pip3",), "uv": (), "poetry": (),
        "pipenv": (), "conda": ("anaconda", "miniconda"), "composer": (), "bundler": (),
        "cargo": (), "homebrew": ("brew",), "maven": (), "gradle": (),
    },
    "lang": {
        "python": ("py", "python3"), "rust": (), "go": ("golang",), "typescript": ("ts",),
        "javascript": ("js",), "java": (), "kotlin": (), "swift": (), "ruby": (), "php": (),
        "c": (), "c++": ("cpp",), "c#": ("csharp",), "elixir": (), "erlang": (), "scala": (),
        "haskell": (), "clojure": (), "zig": (), "dart": (), "lua": (), "perl": (),
        "ocaml": (), "julia": (), "f#": ("fsharp",),
    },
    "framework": {
        "astro": (), "django": (), "flask": (), "fastapi": (),
        "rails": ("ruby on rails", "ror"), "react": ("react.js", "reactjs"),
        "vue": ("vue.js", "vuejs"), "svelte": (), "sveltekit": (), "angular": (),
        "next.js": ("next", "nextjs", "next js"), "nuxt": ("nuxt.js",), "remix": (),
        "express": ("express.js",), "spring": ("spring boot",), "laravel": (), "phoenix": (),
        "htmx": (), "tailwind": ("tailwindcss", "tailwind css"), "jquery": (), "gatsby": (),
        "ember": ("ember.js",),
    },
    "runtime": {"node": ("node.js", "nodejs", "node js"), "bun": (), "deno": ()},
    "database": {
        "postgres": ("postgresql", "psql", "pg"), "mysql": (), "mariadb": (),
        "sqlite": ("sqlite3",), "mongodb": ("mongo",), "redis": (), "dynamodb": (),
        "cassandra": (), "elasticsearch": (), "clickhouse": (), "supabase": (),
        "snowflake": (), "bigquery": (), "duckdb": (),
    },
    "editor": {
        "vim": (), "neovim": ("nvim",), "emacs": (),
        "vscode": ("vs code", "visual studio code"), "intellij": ("intellij idea",),
        "pycharm": (), "webstorm": (), "sublime": ("sublime text",), "zed": (),
        "cursor": (), "helix": (), "xcode": (), "nano": (),
    },
    "os": {
        "linux": (), "macos": ("mac", "osx", "os x", "mac os"), "windows": (), "ubuntu": (),
        "debian": (), "fedora": (), "arch": ("arch linux",), "nixos": (),
    },
    "cloud": {
        "aws": (), "gcp": ("google cloud",), "azure": (), "vercel": (), "netlify": (),
        "cloudflare": (), "heroku": (), "fly.io": (),
    },
    "infra": {"docker": (), "kubernetes": ("k8s",), "terraform": (), "podman": ()},
    "test_framework": {
        "pytest": (), "jest": (), "vitest": (), "mocha": (), "playwright": (), "cypress": (),
    },
    "shell": {"bash": (), "zsh": (), "fish": ()},
    "vcs": {"git": (), "mercurial": ("hg",)},
}

#: lower-case alias (or canonical name) -> (category, canonical name)
_TOOLS: dict[str, tuple[str, str]] = {
    alias: (category, name)
    for category, names in _TOOL_TABLE.items()
    for name, aliases in names.items()
    for alias in (name, *aliases)
}

_LANGUAGES = {
    name: name
    for name in (
        "english", "german", "french", "spanish", "italian", "portuguese", "dutch", "polish",
        "russian", "ukrainian", "japanese", "chinese", "mandarin", "cantonese", "korean",
        "arabic", "hindi", "turkish", "swedish", "norwegian", "danish", "finnish", "greek",
        "czech", "hebrew", "hungarian", "romanian", "vietnamese", "thai", "indonesian",
        "catalan", "bulgarian", "croatian", "serbian", "slovak", "persian",
    )
} | {"deutsch": "german", "français": "french", "francais": "french", "español": "spanish",
     "espanol": "spanish", "italiano": "italian", "nederlands": "dutch"}

_TONES = {
    "formal": "formal", "professional": "formal",
    "casual": "casual", "informal": "casual", "relaxed": "casual", "laid-back": "casual",
    "friendly": "friendly", "friendlier": "friendly", "warm": "friendly", "warmer": "friendly",
    "blunt": "direct", "blunter": "direct", "direct": "direct", "straightforward": "direct",
    "frank": "direct",
}

_CHANNELS = {
    "email": "email", "e-mail": "email", "mail": "email",
    "slack": "slack", "telegram": "telegram",
    "sms": "sms", "text": "sms", "texts": "sms", "text message": "sms",
    "text messages": "sms", "imessage": "sms",
    "whatsapp": "whatsapp", "signal": "signal", "discord": "discord",
    "teams": "teams", "microsoft teams": "teams", "phone": "phone",
}

#: "no X" / "don't use X" objects that are really a style value, not a veto
_STYLE_BANS: dict[str, tuple[str, str]] = {
    "emoji": ("emoji", "none"),
    "bullets": ("format", "prose"),
    "lists": ("format", "prose"),
    **{
        word: ("preamble", "skip")
        for word in (
            "preamble", "preambles", "intro", "intros", "introduction", "introductions",
            "fluff", "filler", "pleasantries", "small talk", "chit-chat", "chitchat", "waffle",
        )
    },
    **{
        word: ("verbosity", "terse")
        for word in (
            "rambling", "long answers", "long replies", "long responses", "long explanations",
            "essays", "walls", "wall",
        )
    },
    **{word: ("tone", "direct") for word in ("sugarcoating", "sugar-coating", "sugar coating")},
}

#: "no X" where X makes it an interjection or a report ("no problem", "no errors"), not a ban
_NO_STOP = frozenset(
    """problem problems prob probs worries worry thanks thank idea clue way need rush hurry wait
    doubt kidding matter offense offence biggie sweat one longer change changes difference luck
    success output response responses answer answers reply replies result results error errors
    issue issues bug bugs warning warnings effect reason question questions comment comments
    pressure stress time chance big deal joke sir dice go can then wonder surprise pun harm
    shame fun point sense access permission power network connection signal internet wifi
    more less much many further thing things worries clue judgement judgment hard way""".split()
)

#: objects that make an edict about a person or a pronoun, never a veto
_PERSON_WORDS = frozenset(
    """me myself him her them us you yourself it this that these those anything something
    everything anyone anybody someone somebody everyone everybody nobody one my your his their
    our mr mrs ms dr sir madam people person mom mum dad boss manager wife husband partner
    friend friends colleague colleagues client clients customer customers""".split()
)

#: objects that are the agent's tools: an edict about them is a tool rule, not a veto
_AGENT_TOOL_WORDS = frozenset(
    """email emails e-mail e-mails mail mails inbox calendar message messages sms text texts
    call calls phone meeting meetings invite invites booking bookings flight flights payment
    payments card cards shell terminal sudo rm command commands deploy deploys deployment
    deployments production prod browser cron contacts""".split()
)

#: words that end an object list ("don't use lodash for this", "no emoji at all")
_STOP = frozenset(
    """for in on at to from with without by of about when whenever while because since unless
    until if as than like anymore again ever please pls plz thanks thank thx now here there
    anywhere instead either too also then so but yet is are was were be been it its that which
    who whatsoever not no never don't dont do though tho etc going these days any more ok okay
    unless except please lol today tonight tomorrow right there's it's e.g i.e eg ie such say
    including especially before after during inside within into over under between""".split()
)
_LEADING_SKIP = frozenset("the a an any some".split())
#: an object starting with a quantity asks for less of it, not none: "don't use so many bullets"
_QUANTITY = frozenset("so too many much more fewer less excessive lots lot".split())
#: after "and"/"," one of these starts a new clause, not another object ("no emoji and answer")
_CLAUSE_STARTERS = frozenset(
    """answer reply respond be keep use give make write call email send tell show explain skip
    get go stop avoid try put add format just please always never don't dont do no not i i'm
    we we're you also remember start lead include mention suggest recommend stick prefer let
    cut drop then only""".split()
)
_GENERIC_SINGULAR = frozenset("library lib package framework module crate gem tool plugin".split())
_GENERIC_NOUNS = _GENERIC_SINGULAR | frozenset(
    "libraries libs packages frameworks modules crates gems tools plugins components".split()
)
_ROLE_HEADS = frozenset(
    """engineer developer dev programmer designer manager scientist analyst architect researcher
    student teacher professor lecturer lawyer attorney doctor physician nurse writer author
    editor journalist consultant founder co-founder cofounder cto ceo cfo coo vp director lead
    intern freelancer contractor owner officer specialist technician tester sre admin
    administrator sysadmin accountant marketer recruiter pm entrepreneur maintainer coder artist
    photographer musician translator trainer coach chef pilot mechanic economist statistician
    mathematician physicist chemist biologist""".split()
)
_ROLE_ENDERS = frozenset("at based working and or but & who whose where".split())
_NAME_PARTICLES = frozenset("de da di du del della der den van von le la bin al am y of &".split())
_NOT_NAMES = frozenset(
    """i i'm i've i'd i'll not a an the in on at and but so just very really here there now
    currently still also always never working from""".split()
)
_ABBREVIATIONS = frozenset(
    "e.g i.e dr mr mrs ms prof vs cf approx st jr sr fig no al a.m p.m u.s mt ft".split()
)
#: abbreviations that also often end a sentence: they end one before a capital letter
_ABBREVIATIONS_AT_END = frozenset("etc inc ltd co corp".split())

# --------------------------------------------------------------------------- patterns

_I = re.IGNORECASE
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'", "\u2032": "'"})
_MASKS = tuple(
    re.compile(p)
    for p in (
        r"(?:```|~~~)[\s\S]*?(?:```|~~~|\Z)",
        r"`[^`\n]*`",
        r"(?m)^[ \t]*>.*$",
        r'"[^"\n]*"',
        "\u201c[^\u201d\n]*\u201d",
        "\u201e[^\u201c\u201d\n]*[\u201c\u201d]",
        "\u00ab[^\u00bb\n]*\u00bb",
        # bounded: a line of unmatched quotes must not cost quadratic time
        r"(?<!\w)'(?!\s)[^\n]{0,300}?'(?!\w)",
    )
)
_LIST_MARKER_RE = re.compile(r"(?m)^([ \t]*)((?:[-*+\u2022]|\d{1,3}[.)])[ \t]+)")
_LEADING_MARKER_RE = re.compile(r"^(?:[-*+\u2022]|\d{1,3}[.)])\s+")
_BOUNDARY_RE = re.compile(r"[.!?\u2026]+(?=\s|$)|\n")
_ABBR_TAIL_RE = re.compile(r"(?:^|[^\w.])((?:\w\.)*\w+)$")
_TRAILING_RE = re.compile(r"[\s.!?\u2026]+$")
_QUESTION_RE = re.compile(r"\?[\s\x00)\]]*$")
_POLITE_RE = re.compile(
    r"^(?:(?:please|so|ok|okay|hey|hi|also|and|but)[\s,]+)*"
    r"(?:(?:can|could|would|will)\s+you|would\s+you\s+mind)\s+(?:(?:please|kindly|just|also)\s+)*",
    _I,
)
_INVERTED_RE = re.compile(
    r"^(?:should|shall|do|does|did|is|are|am|was|were|can|could|would|will|may|might|have|has)"
    r"\s+(?:i|we|you|it|this|that|there|they)\b",
    _I,
)
_HEDGE_RE = re.compile(
    r"\b(?:if\s+(?:at\s+all\s+)?(?:possible|you\s+can|you\s+could|you\s+(?:don't|do\s+not)\s+"
    r"mind|that's\s+ok(?:ay)?|that\s+is\s+ok(?:ay)?|that\s+works|you\s+please)|"
    r"(?:when|where|wherever|whenever)\s+possible)\b",
    _I,
)
_HYPOTHETICAL_RE = re.compile(
    r"\b(?:if|suppose|supposing|imagine|imagining|assuming|assume|hypothetically|"
    r"hypothetical|in\s+case|what\s+if|maybe|perhaps|possibly|probably|considering|"
    r"thinking\s+(?:about|of)|wondering|whether|might|"
    r"(?:i|we)\s+(?:may|could|should|shall|will|plan|intend|hope|wish|"
    r"would(?!\s+(?:like|prefer|rather|love|appreciate)))|"
    r"(?:i|we)(?:'ll|'d(?!\s+(?:like|prefer|rather|love|appreciate)))|"
    r"(?:i'm|i\s+am|we're|we\s+are)\s+(?:going|planning|about|hoping|trying|tempted)\s+to|"
    r"(?:want|wanna|plan|planning)\s+to\s+(?:try|switch|migrate|move|start|learn))\b",
    _I,
)
_THIRD_PERSON_RE = re.compile(r"\b(?:he|she|he's|she's)\b", _I)
_REPORTING_RE = re.compile(
    r"(?:\b(?P<before>\w+)\s+)?\b(?P<subj>[\w']+)\s+(?:uses|works|lives|says|said|tells|told|"
    r"thinks|thought|wants|prefers|likes|hates|believes|claims|wrote|writes|mentioned|"
    r"recommends|recommended|suggested|asked|insists|goes\s+by|is\s+based|is\s+called)\b",
    _I,
)
_NOT_SOMEONE = frozenset("i we it that this which what everything nothing".split())
_TEAMISH = frozenset("team company org organisation organization project codebase stack shop "
                     "startup app backend frontend setup".split())
_NEGATED_BEFORE_RE = re.compile(
    r"\b(?:don't|dont|do\s+not|doesn't|does\s+not|never|not|no\s+need\s+to|no\s+longer|"
    r"without|stop|no)\s+(?!forget\b|hesitate\b)(?:(?!(?:and|but|or)\b)[\w']+\s+){0,2}$",
    _I,
)
_STANDING_RE = re.compile(
    r"\b(?:from\s+now\s+on|from\s+here\s+on|going\s+forward|moving\s+forward|"
    r"in\s+(?:the\s+)?future|for\s+the\s+future|for\s+future\s+reference|always|"
    r"remember\s+that|please\s+remember|remember(?=\s*:)|remember\s+to|don't\s+forget|"
    r"never\s+forget|"
    r"keep\s+in\s+mind|by\s+default|in\s+general|every\s+time|each\s+time|"
    r"every\s+(?:answer|reply|response)|answers|replies|responses)\b"
    r"|\bnever\b.*\bagain\b",
    _I,
)
_CLAUSE_BOUNDARY_RE = re.compile(r"[,;:()\u2013\u2014\x00]|\s-\s")
_FILLER = (
    r"(?:please|pls|plz|kindly|and|also|so|just|but|ok|okay|oh|then|again|seriously|really|"
    r"honestly|remember(?:\s+to)?|btw|by\s+the\s+way|from\s+now\s+on|from\s+here\s+on|"
    r"going\s+forward|moving\s+forward|in\s+(?:the\s+)?future|always|generally|in\s+general|"
    r"by\s+default|i\s+said|like\s+i\s+said|as\s+i\s+said|i\s+repeat|i\s+mean|actually|hey|"
    r"thanks|thank\s+you|however|instead|for\s+the\s+record|one\s+more\s+thing|yeah|yes|no|"
    r"nope|look|listen|note|fyi|sorry|(?:for|in)\s+(?:all|your|every|future)\s+"
    r"(?:answers?|replies|reply|responses?))"
)
_PREFIX_OK_RE = re.compile(rf"^\s*(?:{_FILLER}\b[\s!.-]*)*$", _I)
_JOINER_BEFORE_RE = re.compile(r"\b(?:and|with|plus|also|but|please)\s*$|&\s*$", _I)
_SUBJECT_IN_RE = re.compile(r"\b(?:i|we|he|she|they|it|i'm|we're|it's)\b", _I)
_REST_OK_RE = re.compile(
    r"\s*(?:(?:please|pls|plz|thanks|thank\s+you|thx|at\s+all|anymore|any\s+more|ever|again|"
    r"instead\s+of\s+[\w.-]+|before\s+(?:the\s+|your\s+)?(?:answers?|answering|code|reply)|"
    r"at\s+the\s+(?:start|beginning)|up\s*front|"
    r"whatsoever|from\s+now\s+on|going\s+forward|in\s+(?:the\s+)?future|for\s+now|"
    r"in\s+(?:your\s+|the\s+|any\s+|all\s+|my\s+)?(?:answers?|replies|reply|responses?|code|"
    r"output)|these\s+days|either|instead|rather)\b\s*)*(?:$|[,;:]|(?:and|but|or|also)\b)",
    _I,
)
_AGENT_VERB_RE = re.compile(
    r"\b(?:email|e-mail|mail|send|run|execute|call|phone|message|text|delete|remove|deploy|"
    r"book|pay|buy|purchase|order|schedule|invite|post|publish|push|merge|commit|transfer|"
    r"cancel|forward|cc|contact|ping|notify)\b",
    _I,
)
_TOKEN_RE = re.compile(r"[,;:&+()]|[^\s,;:&()]+")
_ITEM_TOKEN_RE = re.compile(r"^[^\W_][\w.+#'/-]*$")
_VERSION_RE = re.compile(r"^v?\d+(?:\.\d+)*[a-z]?$")
_BULLETS_RE = re.compile(
    r"\bbullet(?:ed)?[\s-]?(?:points?|lists?)\b|\bbulletpoints?\b|\bbullet\b", _I
)
_EMOJI_RE = re.compile(r"\bemoj(?:is?|ii)\b|\bemoticons?\b", _I)
_WORD_AT_RE = re.compile(r"\s*([^\W\d_][\w'.\-]*|&)")
_ROLE_WORD_AT_RE = re.compile(r"\s*([^\W_][\w+#.\-/]*)")
_TZ_RE = re.compile(
    r"(?:(?-i:[A-Z][A-Za-z]+(?:_[A-Za-z]+)*/[A-Z][A-Za-z_]+(?:/[A-Z][A-Za-z_]+)?)"
    r"|(?:UTC|GMT)(?:\s*[+\u2212-]\s*\d{1,2}(?::?\d{2})?)?"
    r"|(?-i:PST|PDT|PT|EST|EDT|ET|CST|CDT|CT|MST|MDT|MT|CET|CEST|EET|EEST|WET|WEST|BST|IST|JST"
    r"|KST|AEST|AEDT|ACST|AWST|NZST|NZDT|HST|AKST|SGT|HKT|MSK)"
    r"|(?:pacific|eastern|central|mountain|atlantic)\s+(?:standard\s+|daylight\s+)?time)"
    r"(?![\w/+])",
    _I,
)
_AS_ROLE_RE = re.compile(r"\s+as\s+(?:an?\s+)?", _I)
_AT_ORG_RE = re.compile(r"\s+(?:at|for)\s+", _I)
_NOT_YET_RE = re.compile(r"\b(?:yet|much|often|a\s+lot|enough|directly)\b", _I)
_NOT_RE = re.compile(r"not\s", _I)
_TEAM_AFTER_RE = re.compile(r"the\s+([\w&.\-]+(?:\s+[\w&.\-]+){0,2}?)\s+(?:team|squad)\b", _I)

_END = (
    r"(?=\s*(?:$|[,;:]|(?:please|pls|plz|thanks|and|but|or|from\s+now\s+on|going\s+forward|"
    r"in\s+(?:the\s+)?future|again|always|for\s+now|overall|tone|with\s+me|"
    r"in\s+(?:your|the|all|my|every))\b))"
)
_LANG = "|".join(sorted(map(re.escape, _LANGUAGES), key=len, reverse=True))
_TONE = "|".join(sorted(map(re.escape, _TONES), key=len, reverse=True))
_ANSWERS = r"(?:answers?|replies|reply|responses?|messages?|explanations?)"

# (pattern, key, value); value None: the named group "v" mapped through _LANGUAGES / _TONES
_STYLE_PATTERNS: tuple[tuple[re.Pattern[str], str, str | None], ...] = tuple(
    (re.compile(p, _I), key, value)
    for p, key, value in (
        (
            r"\b(?:keep|keeping|make|making)\s+(?:it|this|that|them|things|everything|"
            rf"(?:(?:all|your|the|my)\s+)?{_ANSWERS})\s+(?:(?:really|very|nice\s+and)\s+)?"
            r"(?:short|shorter|brief|briefer|concise|tight|terse|succinct|snappy|"
            r"to\s+the\s+point)\b",
            "verbosity", "terse",
        ),
        (r"\bbe\s+(?:more\s+)?(?:brief|briefer|concise|succinct|terse)\b", "verbosity", "terse"),
        (r"\b(?:answer|reply|respond|write)\s+(?:more\s+)?(?:briefly|concisely|succinctly|"
         r"tersely)\b", "verbosity", "terse"),
        (r"\b(?:answer|reply|respond|explain)\s+in\s+(?:more\s+|great\s+|full\s+)?detail\b",
         "verbosity", "detailed"),
        (rf"\b(?:short|shorter|brief|briefer|concise|terse|succinct)\s+{_ANSWERS}\b",
         "verbosity", "terse"),
        (r"\bshorter(?=\s*(?:$|[,;:]|please\b|pls\b|plz\b|thanks\b))", "verbosity", "terse"),
        (r"\btoo\s+(?:long|verbose|wordy|lengthy|much\s+text|detailed)\b", "verbosity", "terse"),
        (r"\b(?:more\s+concise|less\s+(?:verbose|wordy|text|detail|rambling|chatty))\b",
         "verbosity", "terse"),
        (r"\bno\s+(?:more\s+)?walls?\s+of\s+text\b", "verbosity", "terse"),
        (r"\bmore\s+(?:detail|details|detailed|depth|in-depth|thorough|elaboration)\b",
         "verbosity", "detailed"),
        (r"(?<!\ban\s)(?<!\bso\s)(?<!\bvery\s)(?<!\btoo\s)\belaborate\b", "verbosity",
         "detailed"),
        (r"\bgo\s+(?:deeper|into\s+(?:more\s+)?detail)\b", "verbosity", "detailed"),
        (r"\btoo\s+(?:short|brief|terse)\b", "verbosity", "detailed"),
        (rf"\b(?:longer|more\s+detailed|detailed|thorough|in-depth)\s+{_ANSWERS}\b",
         "verbosity", "detailed"),
        (r"\bbe\s+(?:more\s+)?(?:thorough|detailed)\b", "verbosity", "detailed"),
        (
            r"\b(?:skip|drop|lose|cut)\s+(?:the\s+|any\s+|all\s+(?:the\s+)?)?(?:intro|intros|"
            r"introduction|introductions|preamble|preambles|pleasantries|small\s+talk|"
            r"warm-?up|fluff|filler)\b",
            "preamble", "skip",
        ),
        (r"\b(?:get|go|jump|come|cut)\s+(?:right\s+|straight\s+|directly\s+)?to\s+the\s+"
         r"(?:point|answer|chase)\b", "preamble", "skip"),
        (r"\bstraight\s+to\s+the\s+(?:point|answer)\b", "preamble", "skip"),
        (r"\b(?:lead|start)\s+with\s+the\s+answer\b|\banswer\s+first\b", "preamble", "skip"),
        (r"\b(?:use|using|in|as|with)\s+(?:a\s+|some\s+)?(?:bullets|bullet\s+points?|"
         r"bulleted\s+lists?|bullet\s+lists?)\b", "format", "bullets"),
        (r"(?:^|[,;:]\s*)(?:bullets|bullet\s+points|bulleted\s+lists?)\s+(?:please|pls|"
         r"are\s+(?:fine|good|great|better|preferred))\b", "format", "bullets"),
        (r"\b(?:prefer|like|love|want)\s+(?:bullets|bullet\s+points|bulleted\s+lists?)\b",
         "format", "bullets"),
        (r"\b(?:just|only)\s+(?:give\s+me\s+|show\s+me\s+|send\s+me\s+)?(?:the\s+)?code\b"
         r"(?!\s+(?:review|reviews|of|for|that|which|base|snippet|changes|block|quality))",
         "format", "code-only"),
        (r"\bcode\s+only\b", "format", "code-only"),
        (r"(?:^|[,;:]\s*)tables?\s+(?:please|pls|are\s+(?:fine|good|great|better|preferred))\b"
         r"|\b(?:use|using)\s+(?:a\s+)?tables?\b|\b(?:prefer|like|love|want)\s+tables\b"
         r"|\b(?:in|as)\s+(?:a\s+)?tables?(?=\s*(?:$|[,;:]|please\b|pls\b|form\b|format\b))",
         "format", "tables"),
        (r"\b(?:in|as)\s+(?:plain\s+)?(?:prose|paragraphs?|full\s+sentences)\b", "format",
         "prose"),
        (r"\bemojis?\s+(?:are|is)\s+(?:fine|ok|okay|welcome|allowed|great|good)\b", "emoji",
         "ok"),
        (r"\b(?:use|using|add|with|include)\s+(?:some\s+|more\s+)?emojis?\b", "emoji", "ok"),
        (rf"\b(?:answer|reply|respond|write|talk|speak|communicate|chat)(?:\s+to\s+me|\s+back)?"
         rf"\s+(?:only\s+)?in\s+(?P<v>{_LANG})\b", "language", None),
        (rf"\b{_ANSWERS}\s+(?:(?:should\s+be|must\s+be|always)\s+)?in\s+(?P<v>{_LANG})\b",
         "language", None),
        (rf"\bin\s+(?P<v>{_LANG})\s+(?:please|pls|from\s+now\s+on|going\s+forward)\b",
         "language", None),
        (rf"\bswitch\s+to\s+(?P<v>{_LANG})\b", "language", None),
        (rf"\b(?:be|sound|keep\s+it|stay|write|a\s+bit|a\s+little|much|way|more)\s+"
         rf"(?:(?:a\s+bit|a\s+little|much|way|slightly)\s+)?(?:more\s+)?(?P<v>{_TONE})\b{_END}",
         "tone", None),
        (rf"\b(?P<v>{_TONE})\s+(?:tone|style|register|please|pls)\b", "tone", None),
        (r"\b(?:no\s+sugar-?\s?coating|(?:don't|do\s+not)\s+sugar-?\s?coat)\b", "tone",
         "direct"),
    )
)

_BAN_TRIGGER_RE = re.compile(
    r"\b(?:"
    r"(?P<self>(?:i|we)\s+(?:(?:really|just|also|honestly)\s+)?"
    r"(?:(?:don't|dont|do\s+not|no\s+longer|never)\s+(?:use|touch)|"
    r"(?:(?:have|'ve)\s+)?(?:stopped|quit)\s+using|"
    r"(?:don't|dont|do\s+not)\s+want\s+(?:you\s+)?to\s+(?:use|suggest|recommend)))"
    r"|(?P<verb>(?:don't|dont|do\s+not|never)\s+(?:ever\s+)?"
    r"(?P<verbword>use|suggest|recommend|propose|include|add|mention)"
    r"|stop\s+(?P<verbing>using|suggesting|recommending|proposing|including|adding|mentioning)"
    r"|avoid(?:\s+(?:using|suggesting|recommending))?)"
    r"|(?P<no>no(?:\s+more)?)"
    r"|(?P<without>without)"
    r")\b",
    _I,
)

_NAME_TRIGGER_RE = re.compile(r"\bmy\s+(?:full\s+|first\s+|real\s+)?name(?:'s|\s+is)\s+", _I)
_CALL_ME_RE = re.compile(
    r"\b(?:call\s+me|i\s+go\s+by|(?:my\s+)?(?:preferred\s+name|nickname)\s+is)\s+", _I
)
_IN_PLACE_RE = re.compile(
    r"\b(?:(?:i'm|i\s+am)\s+(?:(?:currently|now|still|usually|mostly|normally)\s+)?"
    r"(?:(?:based|located|living|staying)\s+)?|i\s+(?:(?:currently|now|still)\s+)?"
    r"(?:live|reside|work)\s+)(?P<prep>in|on)\s+",
    _I,
)
_TZ_TRIGGER_RE = re.compile(r"\bmy\s+(?:timezone|time\s+zone|tz)\s+is\s+", _I)
_PLACE_TRIGGER_RE = re.compile(r"\bmy\s+(?:location|city|home\s+town|hometown)\s+is\s+", _I)
_EMPLOYER_RE = re.compile(
    r"\b(?:i\s+(?:(?:currently|now|still)\s+)?work\s+(?:at|for)|"
    r"(?:i'm|i\s+am)\s+employed\s+(?:at|by)|my\s+(?:employer|company)\s+is)\s+",
    _I,
)
_ROLE_RE = re.compile(
    r"\b(?P<free>i\s+(?:(?:currently|now)\s+)?work\s+as|"
    r"my\s+(?:role|job|job\s+title|title|position)\s+is)\s+(?:an?\s+)?"
    r"|\b(?P<headed>i'm|i\s+am)\s+(?:an?\s+)",
    _I,
)
_TEAM_RE = re.compile(
    r"\b(?:i\s+(?:(?:currently|now)\s+)?work|i'm|i\s+am)\s+(?:(?:part|a\s+member)\s+of|on|in|"
    r"with|for)\s+(?=the\s)"
    r"|\bmy\s+team\s+is\s+(?=the\s)",
    _I,
)
_TEAM_NAMED_RE = re.compile(
    r"\bmy\s+team\s+is\s+(?:called|named)\s+|\b(?:i'm|i\s+am)\s+on\s+team\s+", _I
)
_TOOL_TRIGGER_RE = re.compile(
    r"\b(?:i|we|(?:our|my)\s+(?:team|company|org|organisation|organization|project|"
    r"codebase|shop|startup|app|backend|frontend|setup))(?:\s+|(?='))"
    r"(?:(?:also|mostly|mainly|primarily|usually|normally|now|currently|only|just|all|"
    r"exclusively|always|still|daily)\s+)*"
    r"(?:(?P<strong>use|uses|(?:are|'re|am|'m|is)\s+using|(?:(?:have|'ve|has)\s+)?"
    r"(?:switched|moved|migrated)\s+(?:over\s+)?to|standardi[sz]ed\s+on)"
    r"|(?P<weak>run|runs|work\s+(?:with|in)|code\s+in|write\s+in|program\s+in|develop\s+in|"
    r"build\s+(?:with|on|in)|rely\s+on|deploy\s+(?:to|on)|prefer|like|love|"
    r"(?:'re|'m|are|am|is)\s+(?:(?:all|now|currently|fully|still|mostly)\s+)?on))\s+"
    r"|\b(?:our|my)\s+(?:tech\s+)?stack\s+(?:is|includes|=|consists\s+of)\s+(?P<stack>)"
    r"|\b(?:our|my)\s+(?:main\s+|primary\s+)?(?:\w+\s+)?(?:backend|frontend|database|db|"
    r"editor|ide|language|os|package\s+manager|runtime|framework|shell|cloud)\s+(?:is|=)\s+"
    r"(?P<known>)",
    _I,
)
#: "I switched from yarn to pnpm": a veto on the old tool (it must be a known one) and the new
_SWITCH_RE = re.compile(
    r"\b(?:i|we)(?:\s+|(?='))(?:(?:have|'ve)\s+)?(?:switched|moved|migrated)\s+"
    r"(?:over\s+|away\s+)?from\s+(?P<old>[\w.+#-]+(?:\s+[\w.+#-]+)?)\s+to\s+",
    _I,
)
_SHOP_RE = re.compile(r"\bwe(?:'re|\s+are)\s+an?\s+(?P<tool>[\w.+#-]+)\s+shop\b", _I)
_CHANNEL_WORD = (
    r"(?P<ch>e-?mail|mail|slack|telegram|sms|text(?:\s+messages?)?|texts|imessage|whatsapp|"
    r"signal|discord|(?:microsoft\s+)?teams|phone|[\w.+-]+@[\w-]+(?:\.[\w-]+)+)"
)
_CHANNEL_RES: tuple[tuple[re.Pattern[str], bool], ...] = (
    # (pattern, the rest of the clause must be filler)
    (re.compile(r"\b(?P<ch>e-?mail|mail|text|sms|slack|telegram|whatsapp|signal|discord)\s+me\b",
                _I), True),
    (re.compile(
        r"\b(?:reach|contact|ping|message|msg|dm|find|notify|get\s+hold\s+of|hit)\s+me\s+"
        rf"(?:up\s+)?(?:on|via|by|over|through|at|in)\s+(?:the\s+)?{_CHANNEL_WORD}(?![\w@])",
        _I), False),
    (re.compile(
        r"\b(?:i\s+prefer|my\s+preferred\s+(?:channel|contact(?:\s+method)?)\s+is|"
        r"(?:the\s+)?best\s+way\s+to\s+reach\s+me\s+is)\s+(?:via\s+|by\s+|on\s+)?"
        rf"{_CHANNEL_WORD}(?![\w@])",
        _I), False),
)

# --------------------------------------------------------------------------- text helpers


def _blank(match: re.Match[str]) -> str:
    """A masked span: same length (offsets stay valid), line breaks kept, the rest NUL."""
    return "".join("\n" if ch == "\n" else "\x00" for ch in match.group())


def _mask(text: str) -> str:
    """`text` with list markers blanked and everything not in the user's own voice masked."""
    text = _LIST_MARKER_RE.sub(lambda m: m.group(1) + " " * len(m.group(2)), text)
    for pattern in _MASKS:
        text = pattern.sub(_blank, text)
    return text


def _is_abbreviation(text: str, dot: int) -> bool:
    """Whether the single "." at `dot` closes an abbreviation or an initial, not a sentence."""
    tail = _ABBR_TAIL_RE.search(text, max(0, dot - 24), dot)
    if tail is None:
        return False
    word = tail.group(1)
    low = word.lower()
    if low in _ABBREVIATIONS or (len(word) == 1 and word.isupper()):
        return True
    if low in _ABBREVIATIONS_AT_END:
        following = text[dot + 1 :].lstrip()
        return not (following[:1].isupper())
    return False


def _sentence_spans(text: str) -> Iterator[tuple[int, int]]:
    """(start, end) of each sentence: a run of . ! ? or … before whitespace, or a line break.

    "sarah@example.com", "https://x.io/a.b", "3.5", "v1.2.3" have no space after their dots
    and stay whole; "e.g.", "Dr.", "vs." and initials ("Ada K. Lovelace") end no sentence.
    """
    start = 0
    for m in _BOUNDARY_RE.finditer(text):
        if m.group() == "." and _is_abbreviation(text, m.start()):
            continue
        if text[start : m.end()].strip():
            yield start, m.end()
        start = m.end()
    if text[start:].strip():
        yield start, len(text)


def _word_slug(words: list[str]) -> str:
    """A slug of whole words: words are dropped from the end until it fits, never cut."""
    parts = [p for p in (slugify(w, KEY_CHARS + 1) for w in words) if p]
    slug = ""
    for part in parts:
        candidate = f"{slug}-{part}" if slug else part
        if len(candidate) > KEY_CHARS:
            break
        slug = candidate
    return slug


def _clean_token(token: str) -> str:
    """A token without surrounding sentence punctuation; versions ("3.11") stay whole."""
    return token.strip(".!?'").strip() if not _VERSION_RE.match(token) else token


def _negated(text: str, at: int) -> bool:
    """Whether the match at `at` is negated by a "don't", "not", "never" just before it."""
    return _NEGATED_BEFORE_RE.search(text, max(0, at - 60), at) is not None


def _clause_prefix(text: str, at: int) -> str:
    """The text from the start of the clause that holds position `at` up to `at`."""
    start = 0
    for m in _CLAUSE_BOUNDARY_RE.finditer(text, 0, at):
        start = m.end()
    return text[start:at]


def _rest_of_clause(text: str) -> str:
    """`text` up to the next clause boundary: what an edict says about its own object."""
    m = _CLAUSE_BOUNDARY_RE.search(text)
    return text if m is None else text[: m.start()]


# --------------------------------------------------------------------------- objects


def _tool(words: list[str]) -> tuple[str, str] | None:
    """(category, canonical name) of a well-known tool, or None."""
    phrase = " ".join(words)
    found = _TOOLS.get(phrase)
    if found is None and len(words) > 1 and _VERSION_RE.match(words[-1]):
        found = _TOOLS.get(" ".join(words[:-1]))
    return found


def _canonical_words(tokens: list[str]) -> list[str]:
    """Lower-case words of an object, with the plain spellings of bullets and emoji, and
    without a trailing version ("Postgres 16") or generic noun ("lodash library")."""
    phrase = _EMOJI_RE.sub("emoji", _BULLETS_RE.sub("bullets", " ".join(tokens).lower()))
    words = phrase.split()
    while len(words) > 1 and _VERSION_RE.match(words[-1]):
        words.pop()
    # "the lodash library" is lodash, "React components" is React; "heavy libraries" stays
    if len(words) > 1 and words[-1] in _GENERIC_NOUNS and (
        _tool(words[:-1]) is not None or (len(words) == 2 and words[-1] in _GENERIC_SINGULAR)
    ):
        words.pop()
    return words


def _objects(
    text: str, *, soft_for_tools: bool = False, commas: bool = True
) -> tuple[list[list[str]], str] | None:
    """Parse "X", "X and Y", "X, Y or Z" from the start of `text`.

    Returns (items as lists of original tokens, the text after them), or None when the object
    is no plain one: an item longer than MAX_ITEM_WORDS or starting with a quantity ("so many
    bullets" asks for fewer, not none). "with"/"plus" join two tools only when
    `soft_for_tools` and the next word is a known tool ("React with TypeScript").
    """
    items: list[list[str]] = []
    current: list[str] = []
    tokens = list(_TOKEN_RE.finditer(text))
    item_end = 0
    i = 0
    while i < len(tokens):
        m = tokens[i]
        raw = m.group()
        low = raw.lower().rstrip(".!?")
        if (raw == "," and not commas) or raw in {";", ":", "(", ")"} or "\x00" in raw:
            break
        if raw in {",", "&", "+"} or low in {"and", "or", "nor", "plus"} or (
            soft_for_tools
            and low in {"with", "plus"}
            and i + 1 < len(tokens)
            and _tool([tokens[i + 1].group().lower().rstrip(".!?")]) is not None
        ):
            if current:
                items.append(current)
                current = []
            i += 1
            continue
        token = _clean_token(raw)
        if not token or _ITEM_TOKEN_RE.match(token) is None:
            break
        if not current:
            if low in _QUANTITY and not items:
                return None
            if low in _LEADING_SKIP:
                i += 1
                continue
            if items and low in _CLAUSE_STARTERS and not (
                raw[:1].isupper() and _tool([low]) is not None
            ):
                break  # "and go deeper" starts a clause, "Python and Go" is a list
        if low in _STOP:
            break
        current.append(token)
        if len(current) > MAX_ITEM_WORDS:
            return None
        item_end = m.end()
        i += 1
    if current:
        items.append(current)
    # what follows the last item, separators included ("no emoji, and answer in German")
    return items, text[item_end:]


def _is_person_or_agent_tool(words: list[str], raw: list[str], verbword: str) -> bool:
    """Whether an edict's object is a person, a pronoun or an agent tool (not a veto)."""
    if any("@" in w for w in raw) or words[0] in _PERSON_WORDS:
        return True
    if any(w in _AGENT_TOOL_WORDS for w in words):
        return True
    # a capitalised unknown after "suggest"/"mention"/"avoid"... may well be someone's name
    # ("don't suggest Sarah"); after "use" it is a product ("don't use Windows")
    return verbword not in {"use", "using"} and (
        raw[0][:1].isupper() and _tool(words) is None
    )


def _bans(core: str) -> list[Fact]:
    """Vetoes ("don't use X", "no X", "I stopped using X") and the style values some of them
    really are ("no preamble", "no emoji", "don't use bullets")."""
    facts: list[Fact] = []
    for m in _BAN_TRIGGER_RE.finditer(core):
        kind = next(k for k in ("self", "verb", "no", "without") if m.group(k))
        # what the user stopped using, or bans outright, is a thing, not a person
        verbword = (
            "use"
            if kind in {"self", "no"}
            else (m.group("verbword") or m.group("verbing") or "").lower()
        )
        prefix = _clause_prefix(core, m.start())
        anchored = _PREFIX_OK_RE.match(prefix) is not None
        after = _rest_of_clause(core[m.end() :])
        if kind == "self" and (_NEGATED_BEFORE_RE.search(prefix) or _NOT_YET_RE.search(after)):
            continue  # "we don't use Postgres yet" is a plan, "I don't use it much" no veto
        # "no X" is a list only with "and"/"or": after a comma comes the next clause
        # ("No worries, take your time")
        parsed = _objects(core[m.end() :], commas=kind != "no")
        if parsed is None:
            continue
        items, rest = parsed
        if not items or (kind == "no" and any(raw[0].lower() in _NO_STOP for raw in items)):
            continue
        rest_clause = _rest_of_clause(rest)
        if _AGENT_VERB_RE.search(rest_clause):
            continue
        rest_ok = _REST_OK_RE.match(rest) is not None
        for raw in items:
            words = _canonical_words(raw)
            if not words:
                continue
            phrase = " ".join(words)
            style = _STYLE_BANS.get(phrase)
            if kind == "without":
                if style is None or _SUBJECT_IN_RE.search(prefix):
                    continue
            elif kind == "no":
                if not rest_ok or words[0] in _NO_STOP or words[0].isdigit():
                    continue
                if style is None and not anchored:
                    continue
                if style is not None and not (anchored or _JOINER_BEFORE_RE.search(prefix)):
                    continue
            elif not anchored and kind == "verb":
                continue
            if _is_person_or_agent_tool(words, raw, verbword):
                continue
            if style is not None:
                facts.append((m.start(), STYLE, *style))
                continue
            tool = _tool(words)
            key = tool[1] if tool is not None else _word_slug(words)
            if key and is_valid_key(veto_key(key, known_tool=tool is not None)):
                facts.append((m.start(), VETO, veto_key(key, known_tool=tool is not None),
                              BANNED))
    return facts


# --------------------------------------------------------------------------- identity


def _proper_run(text: str, *, allow_lower_first: bool = False, digits: bool = False) -> str:
    """The capitalised words at the start of `text` ("Ada Lovelace", "New York", "São Paulo"),
    as written; "" when there is none. Particles ("van", "de", "of") join two capitalised
    words; "I" and words like "not", "here" end the run."""
    words: list[str] = []
    pos = 0
    pattern = _ROLE_WORD_AT_RE if digits else _WORD_AT_RE
    while len(words) < MAX_NAME_WORDS:
        m = pattern.match(text, pos)
        if m is None:
            break
        word = m.group(1)
        bare = word.rstrip("'")
        if not (len(bare) == 2 and bare.endswith(".") and bare[0].isupper()) and (
            bare.lower().rstrip(".") not in _ABBREVIATIONS
        ):
            bare = bare.rstrip(".")  # an initial ("K.") or a title ("Dr.") keeps its dot
        low = bare.lower()
        if not bare or low in _NOT_NAMES or low.endswith("'s"):
            break
        if not bare[0].isupper() and not (digits and bare[0].isdigit()):
            if words and low in _NAME_PARTICLES:
                # "van der Berg": particles join when a capitalised word follows them
                particles, end = [bare], m.end()
                nxt = pattern.match(text, end)
                while nxt is not None and nxt.group(1).lower() in _NAME_PARTICLES:
                    particles.append(nxt.group(1))
                    end = nxt.end()
                    nxt = pattern.match(text, end)
                if nxt is not None and nxt.group(1)[:1].isupper():
                    words.extend(particles)
                    pos = end
                    continue
            if not (allow_lower_first and not words and low not in _STOP):
                break
        words.append(bare)
        pos = m.end()
    while words and words[-1].lower() in _NAME_PARTICLES:
        words.pop()
    return " ".join(words)


def _role_run(text: str, *, headed: bool) -> tuple[str, int]:
    """A role ("data engineer", "senior backend developer"), lower-case, and where it ends in
    `text`; ("", 0) when none. `headed`: the last word must be a role noun ("I'm a data
    engineer", not "I'm a big fan")."""
    words: list[str] = []
    ends: list[int] = []
    pos = 0
    while len(words) <= MAX_NAME_WORDS:
        m = _ROLE_WORD_AT_RE.match(text, pos)
        if m is None:
            break
        word = m.group(1).rstrip(".").lower()
        if not word or (word in _STOP and word != "of") or word in _ROLE_ENDERS:
            break
        words.append(word)
        ends.append(m.end())
        pos = m.end()
    while words and words[-1] == "of":
        words.pop()
        ends.pop()
    if not words or len(words) > MAX_NAME_WORDS:
        return "", 0
    if headed and words[-1] not in _ROLE_HEADS:
        return "", 0
    return " ".join(words), ends[-1]


def _identity(core: str) -> list[Fact]:
    facts: list[Fact] = []

    def add(at: int, key: str, value: str) -> None:
        if value and not _negated(core, at):
            facts.append((at, IDENTITY, key, value))

    for m in _NAME_TRIGGER_RE.finditer(core):
        add(m.start(), "name", _proper_run(core[m.end() :], allow_lower_first=True))
    for m in _CALL_ME_RE.finditer(core):
        add(m.start(), "preferred_name", _proper_run(core[m.end() :]))
    for m in _IN_PLACE_RE.finditer(core):
        rest = core[m.end() :]
        tz = _TZ_RE.match(rest)
        team = _TEAM_AFTER_RE.match(rest)
        if tz is not None:
            add(m.start(), "timezone", squash_spaces(tz.group()))
        elif team is not None:
            add(m.start(), "team", team.group(1))
        elif m.group("prep").lower() == "in":
            place = _proper_run(rest)
            if place and _tool(place.lower().split()) is None and (
                place.lower() not in _LANGUAGES
            ):
                add(m.start(), "location", place)
    for m in _TZ_TRIGGER_RE.finditer(core):
        tz = _TZ_RE.match(core, m.end())
        if tz is not None:
            add(m.start(), "timezone", squash_spaces(tz.group()))
    for m in _PLACE_TRIGGER_RE.finditer(core):
        add(m.start(), "location", _proper_run(core[m.end() :]))
    for m in _EMPLOYER_RE.finditer(core):
        org = _proper_run(core[m.end() :], digits=True)
        add(m.start(), "employer", org)
        # "I work at Acme as a data engineer"
        as_role = _AS_ROLE_RE.match(core, m.end() + len(org)) if org else None
        if as_role is not None and core[m.end() : m.end() + len(org)] == org:
            add(m.start(), "role", _role_run(core[as_role.end() :], headed=False)[0])
    for m in _ROLE_RE.finditer(core):
        rest = core[m.end() :]
        role, role_end = _role_run(rest, headed=m.group("headed") is not None)
        add(m.start(), "role", role)
        after = _AT_ORG_RE.match(rest, role_end) if role else None
        if after is not None:
            add(m.start(), "employer", _proper_run(rest[after.end() :], digits=True))
    for m in _TEAM_RE.finditer(core):
        team = _TEAM_AFTER_RE.match(core, m.end())
        if team is not None:
            add(m.start(), "team", team.group(1))
    for m in _TEAM_NAMED_RE.finditer(core):
        name, _ = _role_run(core[m.end() :], headed=False)
        if name:
            add(m.start(), "team", name)
    return facts


# --------------------------------------------------------------------------- tooling, channel


def _tooling(core: str) -> list[Fact]:
    facts: list[Fact] = []
    for m in _TOOL_TRIGGER_RE.finditer(core):
        if _negated(core, m.start()):
            continue
        strong = m.group("strong") is not None
        capitalised_only = m.group("stack") is not None
        parsed = _objects(core[m.end() :], soft_for_tools=True)
        if parsed is None:
            continue
        for raw in parsed[0]:
            words = _canonical_words(raw)
            if not words or words[0] in _PERSON_WORDS or words[0] in _AGENT_TOOL_WORDS:
                continue
            tool = _tool(words)
            if tool is not None:
                facts.append((m.start(), TOOLING, *tool))
            elif strong or (capitalised_only and raw[0][:1].isupper()):
                key = _word_slug(words)
                if key and is_valid_key(key) and " ".join(words) not in _STYLE_BANS:
                    facts.append((m.start(), TOOLING, key, "uses"))
    for m in _SWITCH_RE.finditer(core):
        if _negated(core, m.start()):
            continue
        old_tool = _tool(_canonical_words(m.group("old").split()))
        new = _objects(core[m.end() :], soft_for_tools=True)
        if old_tool is None or new is None or len(new[0]) != 1:
            continue
        words = _canonical_words(new[0][0])
        tool = _tool(words)
        key = tool[0] if tool is not None else _word_slug(words)
        if key and is_valid_key(key):
            facts.append((m.start(), VETO, veto_key(old_tool[1], known_tool=True), BANNED))
            facts.append((m.start(), TOOLING, key, tool[1] if tool is not None else "uses"))
    for m in _SHOP_RE.finditer(core):
        tool = _tool([m.group("tool").lower()])
        if tool is not None and not _negated(core, m.start()):
            facts.append((m.start(), TOOLING, *tool))
    return facts


def _channel(core: str) -> list[Fact]:
    facts: list[Fact] = []
    for pattern, needs_filler in _CHANNEL_RES:
        for m in pattern.finditer(core):
            if _negated(core, m.start()):
                continue
            if needs_filler and _REST_OK_RE.match(core, m.end()) is None:
                continue
            word = squash_spaces(m.group("ch").lower())
            value = "email" if "@" in word else _CHANNELS.get(word.replace("e-mail", "email"))
            if value is not None:
                facts.append((m.start(), CHANNEL, "primary", value))
    return facts


#: every style pattern needs one of these words: a sentence with none of them (most sentences)
#: is not scanned forty times for a style it cannot state
_STYLE_WORDS = frozenset(
    """short shorter brief briefer concise tight terse succinct snappy point briefly concisely
    succinctly tersely detail details detailed long verbose wordy lengthy text rambling chatty
    wall walls depth thorough elaboration elaborate deeper longer intro intros introduction
    introductions preamble preambles pleasantries small warm fluff filler answer chase bullets
    bullet bulleted code tables table prose paragraph paragraphs sentences emoji emojis sugar
    sugarcoat sugarcoating coat coating""".split()
) | frozenset(w for name in (*_LANGUAGES, *_TONES) for w in re.findall(r"[a-z]+", name))
_WORD_RE = re.compile(r"[a-z]+")
#: a message states nothing unless it has a style word or one of these: every other rule is
#: anchored on the speaker ("I", "my", "we", "our", "me") or on a ban ("don't", "no", ...)
#: bans start at a negation or a speaker's "I/we don't use"; identity and tooling at a speaker
_BAN_WORDS = frozenset("i we don dont not never stop avoid no without".split())
_SPEAKER_WORDS = frozenset("i my me we our".split())
_MESSAGE_WORDS = _STYLE_WORDS | _BAN_WORDS | _SPEAKER_WORDS | {"me"}


def _style(core: str) -> list[Fact]:
    facts: list[Fact] = []
    for pattern, key, value in _STYLE_PATTERNS:
        for m in pattern.finditer(core):
            if _negated(core, m.start()):
                continue
            if value is None:
                word = m.group("v").lower()
                value = _LANGUAGES.get(word) if key == "language" else _TONES.get(word)
                if value is None:
                    continue
                facts.append((m.start(), STYLE, key, value))
                value = None
            else:
                facts.append((m.start(), STYLE, key, value))
    return facts


# --------------------------------------------------------------------------- sentences


def _about_someone_else(core: str) -> bool:
    """A third-person subject of a stating verb: "my manager uses", "Sarah says", "he works".
    "I"/"we" and "our team"/"my company" (the user's own) are not someone else."""
    if _THIRD_PERSON_RE.search(core):
        return True
    for m in _REPORTING_RE.finditer(core):
        subj = m.group("subj").lower()
        before = (m.group("before") or "").lower()
        if subj in _NOT_SOMEONE:
            continue
        if subj in _TEAMISH and before in {"our", "my"}:
            continue
        return True
    return False


def _analyse(body: str) -> list[Fact]:
    """The facts one masked sentence states, in the order they appear."""
    is_question = _QUESTION_RE.search(body) is not None
    core = _TRAILING_RE.sub("", body).strip()
    polite = _POLITE_RE.match(core)
    if polite is not None:
        core = core[polite.end() :]
        if _NOT_RE.match(core):
            core = "don't " + core[4:]
    elif is_question or _INVERTED_RE.match(core):
        return []
    core = _HEDGE_RE.sub(",", core)
    words = frozenset(_WORD_RE.findall(core.lower()))
    if not core or _MESSAGE_WORDS.isdisjoint(words):
        return []
    # Each family of rules is anchored on words it cannot do without (see the gates), so a
    # sentence is only scanned by the rules that could match it; the costlier filters run
    # once something was found.
    facts = _style(core) if not _STYLE_WORDS.isdisjoint(words) else []
    if not _BAN_WORDS.isdisjoint(words):
        facts += _bans(core)
    if not _SPEAKER_WORDS.isdisjoint(words):
        facts += _identity(core) + _tooling(core)
    if "me" in words:
        facts += _channel(core)
    if not facts or _HYPOTHETICAL_RE.search(core) or _about_someone_else(core):
        return []
    facts.sort(key=lambda f: f[0])
    values: dict[tuple[str, str], set[str]] = {}
    for _, cls, key, value in facts:
        values.setdefault((cls, key), set()).add(value)
    # "no bullets" only says prose for want of another format: "don't use bullets, use
    # tables" is tables
    formats = values.get((STYLE, "format"), set())
    if "prose" in formats and len(formats) == 2:
        formats.discard("prose")
        facts = [f for f in facts if f[1:] != (STYLE, "format", "prose")]
    return [
        f for f in facts if f[1] not in _SINGLE_VALUED or len(values[(f[1], f[2])]) == 1
    ]


def find_statements(message: str) -> list[Statement]:
    """The preferences `message` states plainly, sentence by sentence, in message order.

    One statement per distinct (class, key, value) of a sentence; the same facet stated in two
    sentences is two statements (their framing may differ). Never raises on any text.
    """
    if not message or not message.strip():
        return []
    text = message.translate(_APOSTROPHES)
    if _MESSAGE_WORDS.isdisjoint(_WORD_RE.findall(text.lower())):
        return []  # most chat messages: nothing to read, and no need to split them
    masked = _mask(text)
    out: list[Statement] = []
    for start, end in _sentence_spans(masked):
        body = squash_spaces(masked[start:end])
        if not body or len(body) > MAX_SENTENCE_CHARS or not body.strip("\x00 "):
            continue
        facts = _analyse(body)
        if not facts:
            continue
        standing = _STANDING_RE.search(body) is not None
        sentence = _LEADING_MARKER_RE.sub("", squash_spaces(message[start:end]))
        seen: set[tuple[str, str, str]] = set()
        for _, cls, key, value in facts:
            if (cls, key, value) in seen or not is_valid_key(key):
                continue
            seen.add((cls, key, value))
            out.append(Statement(cls, key, value, sentence, standing))
    return out


def statement_candidates(
    message: str, *, session_id: str, turn_id: str, observed_at: float,
    statements: Sequence[Statement] | None = None,
) -> list[Candidate]:
    """One Explicit candidate per distinct (class, key, value) stated in `message`.

    The same facet stated twice in one message is one observation of one turn, so it is one
    candidate; the derived event id (`Candidate.event_id`) then makes a replay a duplicate.
    """
    seen: set[tuple[str, str, str]] = set()
    out: list[Candidate] = []
    for s in find_statements(message) if statements is None else statements:
        triple = (s.facet_class, s.key, s.value)
        if triple in seen:
            continue
        seen.add(triple)
        out.append(
            Candidate(
                facet_class=s.facet_class,
                key=s.key,
                value=s.value,
                cue_family=CueFamily.EXPLICIT.value,
                confidence=CONFIDENCE,
                evidence=({"type": "turn", "session_id": session_id, "turn_id": turn_id},),
                observed_at=observed_at,
                producer=EXPLICIT_STATEMENT,
            )
        )
    return out
