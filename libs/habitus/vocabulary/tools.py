"""The curated catalogue of tools the deterministic readers may name, by category.

A tooling facet is `tooling/<category>=<tool>` ("we use Postgres" is `tooling/database=postgres`),
so two tools of one category compete for one key and a correction ("we moved to bun") replaces
the old value. Aliases are the spellings people use ("PostgreSQL", "psql", "VS Code",
"golang"). A tool can belong to two categories (Bun is a runtime and a package manager): the
first listed is its usual one, and a reader picks another only when the sentence says so
(replacing a package manager, "install with bun"). Libraries are no tooling facet of their
own; they are listed so that "never suggest lodash" is a veto the vocabulary knows.
"""

from __future__ import annotations

import re

from retrie.trie import Trie

CATEGORIES: dict[str, dict[str, tuple[str, ...]]] = {
    "package_manager": {
        "npm": (), "pnpm": (), "yarn": (), "pip": ("pip3",), "uv": (), "poetry": (),
        "pipenv": (), "conda": ("anaconda", "miniconda"), "composer": (), "bundler": (),
        "cargo": (), "homebrew": ("brew",), "maven": (), "gradle": (), "bun": (),
    },
    "language": {
        "python": ("py", "python3"), "rust": (), "go": ("golang",), "typescript": ("ts",),
        "javascript": ("js",), "java": (), "kotlin": (), "swift": (), "ruby": (), "php": (),
        "c": (), "c++": ("cpp",), "c#": ("csharp",), "elixir": (), "erlang": (), "scala": (),
        "haskell": (), "clojure": (), "zig": (), "dart": (), "lua": (), "perl": (),
        "ocaml": (), "julia": (), "r": (), "sql": (), "bash": (), "powershell": (),
        "html": (), "css": (), "matlab": (), "objective-c": ("objc",), "fortran": (),
        "cobol": (), "solidity": (), "groovy": (), "f#": ("fsharp",),
    },
    "runtime": {"node": ("node.js", "nodejs", "node js"), "bun": (), "deno": ()},
    "framework": {
        "astro": (), "django": (), "flask": (), "fastapi": (), "rails": ("ruby on rails",),
        "react": ("react.js", "reactjs"), "vue": ("vue.js", "vuejs"), "svelte": (),
        "sveltekit": (), "angular": (), "next.js": ("nextjs", "next js"), "nuxt": ("nuxt.js",),
        "remix": (), "express": ("express.js",), "spring": ("spring boot",), "laravel": (),
        "phoenix": (), "htmx": (), "tailwind": ("tailwindcss", "tailwind css"), "gatsby": (),
    },
    "database": {
        "postgres": ("postgresql", "psql", "pg"), "mysql": (), "mariadb": (),
        "sqlite": ("sqlite3",), "mongodb": ("mongo",), "redis": (), "dynamodb": (),
        "cassandra": (), "elasticsearch": (), "clickhouse": (), "supabase": (),
        "snowflake": (), "bigquery": (), "duckdb": (),
    },
    "cloud": {
        "aws": ("amazon web services",), "gcp": ("google cloud",), "azure": (), "vercel": (),
        "netlify": (), "cloudflare": (), "heroku": (), "fly.io": (), "digitalocean": (),
    },
    "editor": {
        "vim": (), "neovim": ("nvim",), "emacs": (), "vscode": ("vs code", "visual studio code"),
        "intellij": ("intellij idea",), "pycharm": (), "webstorm": (),
        "sublime": ("sublime text",), "zed": (), "cursor": (), "helix": (), "xcode": (),
    },
    "os": {
        "linux": (), "macos": ("mac", "osx", "os x", "mac os"), "windows": (), "ubuntu": (),
        "debian": (), "fedora": (), "arch": ("arch linux",), "nixos": (),
    },
    "test_framework": {
        "pytest": (), "jest": (), "vitest": (), "mocha": (), "playwright": (), "cypress": (),
    },
    "infra": {"docker": (), "kubernetes": ("k8s",), "terraform": (), "podman": ()},
    "ci": {
        "github-actions": ("github actions", "gh actions"), "gitlab-ci": ("gitlab ci",),
        "jenkins": (), "circleci": ("circle ci",), "buildkite": (), "travis": ("travis ci",),
    },
    # what schedules a data team's pipelines ("We abandoned Airflow for Dagster")
    "orchestrator": {
        "airflow": ("apache airflow",), "dagster": (), "prefect": (), "kestra": (),
        "argo-workflows": ("argo workflows",),
    },
}
#: known libraries: never a tooling facet, but a veto may name them
LIBRARIES: dict[str, tuple[str, ...]] = {
    "lodash": (), "jquery": (), "moment": ("moment.js", "momentjs"), "axios": (),
    "pandas": (), "numpy": (), "webpack": (), "redux": (), "mongoose": (), "eslint": (),
    "prettier": (), "requests": (), "sqlalchemy": (), "celery": (),
}
#: tools whose name is an everyday word: read as a tool only when written as a name or when
#: the sentence is about tools ("we use Go"; not "go ahead", "in the mac and cheese")
AMBIGUOUS = frozenset({"go", "c", "r", "rust", "swift", "spring", "express", "cursor",
                       "helix", "phoenix", "remix", "arch", "mac", "windows", "pg", "ts",
                       "js", "py", "brew", "zed", "uv", "dart", "julia", "ruby", "mocha",
                       "next.js", "requests", "moment", "redis", "node", "bun", "deno",
                       "prefect"})

_ALIASES: dict[str, str] = {}
_CATEGORIES_OF: dict[str, tuple[str, ...]] = {}
for _category, _tools in CATEGORIES.items():
    for _name, _aliases in _tools.items():
        _CATEGORIES_OF[_name] = (*_CATEGORIES_OF.get(_name, ()), _category)
        for _alias in (_name, *_aliases):
            _ALIASES[_alias] = _name
for _name, _aliases in LIBRARIES.items():
    for _alias in (_name, *_aliases):
        _ALIASES.setdefault(_alias, _name)
# Bun is most often named as a runtime: its usual category comes first
_CATEGORIES_OF["bun"] = ("runtime", "package_manager")

#: Every alias as a trie ("b(?:rew|un(?:dler)?)"): at each word start only the aliases that begin
#: with its letters are tried, where a flat alternation tried all 175 in turn. Each optional tail
#: is greedy, so the longest alias wins ("ruby on rails" over "ruby", "vs code" over a bare
#: "code") and a shorter one is tried only when the longer one is not followed by a boundary.
_ALIAS_RE = re.compile(
    r"(?<![\w.#+-])(" + Trie(*_ALIASES).pattern() + r")(?![\w#+']|\.\w)", re.IGNORECASE)


def canonical_tool(text: str) -> str | None:
    """The catalogue name of the tool or library `text` spells, or None."""
    return _ALIASES.get(" ".join(text.split()).lower())


def categories(tool: str) -> tuple[str, ...]:
    """The categories of a catalogue tool, usual first; () for a library or unknown name."""
    return _CATEGORIES_OF.get(tool, ())


def is_tool(category: str, value: str) -> bool:
    return category in CATEGORIES and value in CATEGORIES[category]


def is_known_thing(value: str) -> bool:
    """A tool of any category or a listed library: what `veto/tool=<thing>` may name."""
    return value in _CATEGORIES_OF or value in LIBRARIES


def mentions(text: str) -> list[tuple[int, int, str, str]]:
    """(start, end, as written, canonical name) of every tool or library named in `text`."""
    return [(m.start(), m.end(), m.group(1), _ALIASES[m.group(1).lower()])
            for m in _ALIAS_RE.finditer(text)]
