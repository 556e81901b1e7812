"""`make eval`: precision and recall of the extractor's facets on our labelled corpus.

The extractor's prompt and validation are tested with scripted answers; whether a real model,
given that prompt, finds the facets a person would find is a different question, and only a
real endpoint can answer it. This harness sends every item of `examples/eval/corpus.jsonl`
through the same path the service uses (the item's material as chunks, the extraction prompt,
`LlmClient.complete_json` with the extraction schema, `validate_extraction`) and compares the
facets that survive validation with the labels.

Labels are in the vocabulary's canonical forms (`style/language=de`, `tooling/language=python`,
`identity/timezone=Asia/Kolkata`), because validation stores every facet it keeps in them: a
label, or an alternative, that validation would not store as it is (`validation.facet_problem`)
could never be matched, so the corpus refuses it as a `CorpusError` naming the line.

Matching: a predicted facet matches an expected one when class and key are equal and the
values agree: equal after normalisation (case-folded, whitespace collapsed, punctuation
stripped at the ends), or one contains the other as whole words ("Berlin marathon" and "run
the Berlin marathon in September"). An expected facet may list `alternatives`, other values
that count as the same answer ("terse" / "concise"). Each expected facet matches at most one
prediction and each prediction at most one expected facet, by a maximum matching, so the
order in which the model lists its facets changes nothing.

Precision = matched predictions / predictions, recall = matched expected / expected, per
class and overall; a ratio over nothing is "n/a", never 1.0 (a model that answers nothing has
not been precise). Rejections by reason and LLM failures by reason are counted beside them:
a facet the validator quarantined is no prediction, and an item whose call failed still
counts its expected facets.

The scoring functions are pure; the I/O (corpus file, endpoint, terminal) is at the bottom.

Long on purpose: the whole `make eval` harness in one file (corpus, matching, scoring,
report, running), each step a section below, run as `python -m services.extractor.evaluate`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast, get_args

from rich.console import Console
from rich.table import Table

from habitus.events.domain import FacetClass
from habitus.events.evidence import DocumentChunkRef, EmailMessageRef, TurnRef
from habitus.llm import LlmClient, LlmError, LlmSettings
from services.extractor.material import (
    Chunk,
    ChunkDraft,
    ChunkEvidence,
    ChunkKind,
    SourceKey,
    bounded,
    clean_text,
    window_chunks,
)
from services.extractor.prompts import EXTRACT_VERSION, EXTRACTION_SCHEMA, extraction_messages
from services.extractor.validation import facet_problem, is_canonical_key, validate_extraction

CLASSES: tuple[str, ...] = ("style", "identity", "tooling", "veto", "goal", "channel")
MATERIAL_KINDS: frozenset[str] = frozenset(get_args(ChunkKind))
DEFAULT_CORPUS = Path("examples/eval/corpus.jsonl")


# --------------------------------------------------------------------------- the corpus


@dataclass(frozen=True)
class Facet:
    """A (class, key, value) triple: a label, or a facet the model produced and validation kept.

    `alternatives` are further values a label accepts; a prediction has none.
    """

    class_: str
    key: str
    value: str
    alternatives: tuple[str, ...] = ()

    def label(self) -> str:
        return f"{self.class_}/{self.key}={self.value}"


@dataclass(frozen=True)
class MaterialPiece:
    """One piece of an item's material: what the user (or someone else) wrote, and as what."""

    kind: ChunkKind
    text: str


@dataclass(frozen=True)
class EvalItem:
    id: str
    source: str  # "conversations" | "email" | "document:<id>"
    material: tuple[MaterialPiece, ...]
    expected: tuple[Facet, ...]
    note: str | None = None


class CorpusError(ValueError):
    """The corpus file is not what the README describes (the message names the line)."""


def _need_str(obj: dict[str, Any], name: str, where: str) -> str:
    value = obj.get(name)
    if not isinstance(value, str) or not value.strip():
        raise CorpusError(f"{where}: {name!r} must be a non-empty string")
    return value


def parse_item(obj: Any, where: str = "item") -> EvalItem:
    """One corpus line, checked: a label the harness cannot score is a corpus bug, said early."""
    if not isinstance(obj, dict):
        raise CorpusError(f"{where}: not a JSON object")
    item_id = _need_str(obj, "id", where)
    where = f"{where} ({item_id})"
    source = _need_str(obj, "source", where)
    if source not in ("conversations", "email") and not (
        source.startswith("document:") and len(source) > len("document:")
    ):
        raise CorpusError(f"{where}: source must be conversations, email or document:<id>")
    raw_material = obj.get("material")
    if not isinstance(raw_material, list) or not raw_material:
        raise CorpusError(f"{where}: material must be a non-empty list")
    material: list[MaterialPiece] = []
    for piece in raw_material:
        if not isinstance(piece, dict) or piece.get("kind") not in MATERIAL_KINDS:
            raise CorpusError(f"{where}: material kind must be one of {sorted(MATERIAL_KINDS)}")
        kind = cast(ChunkKind, piece["kind"])
        material.append(MaterialPiece(kind=kind, text=_need_str(piece, "text", where)))
    raw_expected = obj.get("expected")
    if not isinstance(raw_expected, list):
        raise CorpusError(f"{where}: expected must be a list (empty for a negative)")
    expected: list[Facet] = []
    for label in raw_expected:
        if not isinstance(label, dict):
            raise CorpusError(f"{where}: each expected facet must be an object")
        class_ = _need_str(label, "class", where)
        key = _need_str(label, "key", where)
        if class_ not in CLASSES:
            raise CorpusError(f"{where}: unknown class {class_!r}")
        if not is_canonical_key(key, FacetClass(class_)):
            raise CorpusError(f"{where}: key {key!r} is not a canonical key")
        alternatives = label.get("alternatives", [])
        if not isinstance(alternatives, list) or not all(
            isinstance(a, str) and a.strip() for a in alternatives
        ):
            raise CorpusError(f"{where}: alternatives must be a list of non-empty strings")
        value = _need_str(label, "value", where)
        for given in (value, *alternatives):
            problem = facet_problem(FacetClass(class_), key, given)
            if problem is not None:  # validation would never keep it: no model could match it
                raise CorpusError(f"{where}: label {class_}/{key}={given!r}: {problem}")
        expected.append(Facet(class_, key, value, tuple(alternatives)))
    note = obj.get("note")
    if note is not None and not isinstance(note, str):
        raise CorpusError(f"{where}: note must be a string")
    return EvalItem(item_id, source, tuple(material), tuple(expected), note)


def parse_corpus(lines: Iterable[str]) -> list[EvalItem]:
    """Items from JSON lines (blank lines skipped); ids must be unique."""
    items: list[EvalItem] = []
    seen: set[str] = set()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise CorpusError(f"line {number}: not JSON ({exc.msg})") from exc
        item = parse_item(obj, f"line {number}")
        if item.id in seen:
            raise CorpusError(f"line {number}: duplicate id {item.id!r}")
        seen.add(item.id)
        items.append(item)
    return items


def load_corpus(path: Path) -> list[EvalItem]:
    with path.open(encoding="utf-8") as handle:
        return parse_corpus(handle)


# --------------------------------------------------------------------------- matching

#: typographic marks a model may use where the label has plain ones
_TYPOGRAPHIC = str.maketrans({
    "\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201b": "'", "\u2032": "'",
    "\u201c": '"', "\u201d": '"', "\u201e": '"', "\u00ab": '"', "\u00bb": '"',
    "\u2010": "-", "\u2011": "-", "\u2012": "-", "\u2013": "-", "\u2014": "-", "\u2212": "-",
})
#: stripped from the ends of a value; "+" and "#" are not, so "C++" and "C#" stay apart from "C"
_END_PUNCTUATION = " \t\n.,;:!?\"'`()[]{}<>*_~-\u3002\u3001\uff0c\uff01\uff1f"
_SPACE_RE = re.compile(r"\s+")
#: a word: letters and digits, joined inside by "." or "'" ("node.js", "don't"), with a trailing
#: "+" or "#" ("c++", "c#"); hyphens, slashes and underscores separate words, so
#: "nested-bullets" is "nested bullets" and "Europe/Berlin" contains "Berlin"
_WORD_RE = re.compile(r"[^\W_]+(?:['.][^\W_]+)*[+#]*")


def normalise_value(value: str) -> str:
    """Case-folded, typographic marks made plain, whitespace collapsed, punctuation stripped
    from both ends: the form two values are compared in."""
    text = unicodedata.normalize("NFKC", value).translate(_TYPOGRAPHIC).casefold()
    return _SPACE_RE.sub(" ", text).strip(_END_PUNCTUATION)


def value_words(value: str) -> tuple[str, ...]:
    return tuple(_WORD_RE.findall(normalise_value(value)))


def _contains_words(haystack: Sequence[str], needle: Sequence[str]) -> bool:
    n = len(needle)
    if n == 0 or n > len(haystack):
        return False
    return any(tuple(haystack[i : i + n]) == tuple(needle) for i in range(len(haystack) - n + 1))


def values_match(a: str, b: str) -> bool:
    """Equal after normalisation, or one a run of whole words of the other. Empty never
    matches (an empty value says nothing)."""
    na, nb = normalise_value(a), normalise_value(b)
    if not na or not nb:
        return False
    if na == nb:
        return True
    wa, wb = value_words(a), value_words(b)
    return _contains_words(wa, wb) or _contains_words(wb, wa)


def facet_matches(predicted: Facet, expected: Facet) -> bool:
    """Same class, same key, and the value agrees with the label's value or an alternative."""
    if predicted.class_ != expected.class_ or predicted.key != expected.key:
        return False
    return any(values_match(predicted.value, v) for v in (expected.value, *expected.alternatives))


def match_facets(expected: Sequence[Facet], predicted: Sequence[Facet]) -> list[tuple[int, int]]:
    """A maximum one-to-one matching as (expected index, predicted index) pairs, sorted.

    Greedy pairing could spend a loose prediction on a label a later, exact one needed;
    augmenting paths (a few facets per item, so the cost is nothing) never do.
    """
    edges = [[p for p, pred in enumerate(predicted) if facet_matches(pred, exp)]
             for exp in expected]
    owner: dict[int, int] = {}  # predicted index -> expected index

    def augment(e: int, visited: set[int]) -> bool:
        for p in edges[e]:
            if p in visited:
                continue
            visited.add(p)
            if p not in owner or augment(owner[p], visited):
                owner[p] = e
                return True
        return False

    for e in range(len(expected)):
        augment(e, set())
    return sorted((e, p) for p, e in owner.items())


# --------------------------------------------------------------------------- scoring


@dataclass(frozen=True)
class ItemOutcome:
    """What happened to one item: the labels, the valid predictions, and how they paired up."""

    item_id: str
    expected: tuple[Facet, ...]
    predicted: tuple[Facet, ...]
    matches: tuple[tuple[int, int], ...]
    rejections: tuple[str, ...] = ()  # validation reasons, one per rejected facet or output
    failure: str | None = None  # the LLM failure reason, when the call failed
    tokens_in: int = 0
    tokens_out: int = 0

    @property
    def missed(self) -> tuple[Facet, ...]:
        hit = {e for e, _ in self.matches}
        return tuple(f for i, f in enumerate(self.expected) if i not in hit)

    @property
    def spurious(self) -> tuple[Facet, ...]:
        hit = {p for _, p in self.matches}
        return tuple(f for i, f in enumerate(self.predicted) if i not in hit)


def score_item(item_id: str, expected: Sequence[Facet], predicted: Sequence[Facet], *,
               rejections: Sequence[str] = (), failure: str | None = None,
               tokens_in: int = 0, tokens_out: int = 0) -> ItemOutcome:
    return ItemOutcome(
        item_id=item_id, expected=tuple(expected), predicted=tuple(predicted),
        matches=tuple(match_facets(expected, predicted)), rejections=tuple(rejections),
        failure=failure, tokens_in=tokens_in, tokens_out=tokens_out)


@dataclass(frozen=True)
class Counts:
    """Tallies for one class (or all). With one-to-one matching, matched predictions and
    matched labels are the same number."""

    expected: int = 0
    predicted: int = 0
    matched: int = 0

    @property
    def precision(self) -> float | None:
        return self.matched / self.predicted if self.predicted else None

    @property
    def recall(self) -> float | None:
        return self.matched / self.expected if self.expected else None

    def __add__(self, other: Counts) -> Counts:
        return Counts(self.expected + other.expected, self.predicted + other.predicted,
                      self.matched + other.matched)


@dataclass(frozen=True)
class Report:
    items: int
    per_class: dict[str, Counts]
    overall: Counts
    rejections: dict[str, int]
    failures: dict[str, int]
    negatives: int  # items labelled with no facet
    negatives_clean: int  # of those, items with no valid prediction either
    tokens_in: int = 0
    tokens_out: int = 0


def item_counts(outcome: ItemOutcome) -> dict[str, Counts]:
    """Per class: labels, predictions and matches of one item."""
    expected = Counter(f.class_ for f in outcome.expected)
    predicted = Counter(f.class_ for f in outcome.predicted)
    matched = Counter(outcome.expected[e].class_ for e, _ in outcome.matches)
    return {c: Counts(expected[c], predicted[c], matched[c])
            for c in sorted(set(expected) | set(predicted))}


def summarise(outcomes: Iterable[ItemOutcome]) -> Report:
    """The totals over items: per class (the six always listed, in their usual order), overall,
    rejections and failures by reason, and how many negatives stayed clean."""
    per_class: dict[str, Counts] = {c: Counts() for c in CLASSES}
    rejections: Counter[str] = Counter()
    failures: Counter[str] = Counter()
    items = negatives = clean = tokens_in = tokens_out = 0
    for outcome in outcomes:
        items += 1
        for class_, counts in item_counts(outcome).items():
            per_class[class_] = per_class.get(class_, Counts()) + counts
        rejections.update(outcome.rejections)
        if outcome.failure is not None:
            failures[outcome.failure] += 1
        if not outcome.expected:
            negatives += 1
            clean += not outcome.predicted
        tokens_in += outcome.tokens_in
        tokens_out += outcome.tokens_out
    overall = sum(per_class.values(), Counts())
    return Report(
        items=items, per_class=per_class, overall=overall,
        rejections=dict(sorted(rejections.items())), failures=dict(sorted(failures.items())),
        negatives=negatives, negatives_clean=clean, tokens_in=tokens_in, tokens_out=tokens_out)


def format_ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def report_tables(report: Report) -> list[Table]:
    """The figures as Rich tables: per class and overall, then rejections and failures."""
    scores = Table(title=f"Extractor eval: {report.items} items")
    for name in ("class", "expected", "predicted", "matched", "precision", "recall"):
        scores.add_column(name, justify="left" if name == "class" else "right")
    for class_, c in report.per_class.items():
        scores.add_row(class_, str(c.expected), str(c.predicted), str(c.matched),
                       format_ratio(c.precision), format_ratio(c.recall))
    o = report.overall
    scores.add_section()
    scores.add_row("overall", str(o.expected), str(o.predicted), str(o.matched),
                   format_ratio(o.precision), format_ratio(o.recall), style="bold")
    tables = [scores]
    other = Table(title="Negatives, rejections and failures")
    other.add_column("what")
    other.add_column("count", justify="right")
    other.add_row("negative items with no prediction",
                  f"{report.negatives_clean} of {report.negatives}")
    for reason, count in report.rejections.items():
        other.add_row(f"rejected: {reason}", str(count))
    for reason, count in report.failures.items():
        other.add_row(f"LLM failure: {reason}", str(count))
    other.add_row("tokens in / out", f"{report.tokens_in} / {report.tokens_out}")
    tables.append(other)
    return tables


def misses_table(outcomes: Iterable[ItemOutcome]) -> Table:
    """Per item, what was missed and what was predicted without a label (for `--details`)."""
    table = Table(title="Items with a miss, a spurious facet or a failure")
    for name in ("item", "missed", "spurious", "rejected / failed"):
        table.add_column(name, overflow="fold")
    for o in outcomes:
        if o.missed or o.spurious or o.rejections or o.failure:
            trouble = [*o.rejections, *([f"LLM {o.failure}"] if o.failure else [])]
            table.add_row(o.item_id, "\n".join(f.label() for f in o.missed),
                          "\n".join(f.label() for f in o.spurious), "\n".join(trouble))
    return table


def _facet_json(f: Facet) -> dict[str, Any]:
    return {"class": f.class_, "key": f.key, "value": f.value}


def report_json(report: Report, outcomes: Iterable[ItemOutcome]) -> dict[str, Any]:
    """The report and every item's outcome, for `--json` (comparing runs, models, prompts)."""
    def counts(c: Counts) -> dict[str, Any]:
        return {"expected": c.expected, "predicted": c.predicted, "matched": c.matched,
                "precision": c.precision, "recall": c.recall}

    return {
        "items": report.items,
        "overall": counts(report.overall),
        "per_class": {k: counts(v) for k, v in report.per_class.items()},
        "rejections": report.rejections,
        "failures": report.failures,
        "negatives": {"items": report.negatives, "clean": report.negatives_clean},
        "tokens": {"in": report.tokens_in, "out": report.tokens_out},
        "outcomes": [
            {"id": o.item_id, "expected": [_facet_json(f) for f in o.expected],
             "predicted": [_facet_json(f) for f in o.predicted],
             "missed": [_facet_json(f) for f in o.missed],
             "spurious": [_facet_json(f) for f in o.spurious],
             "rejections": list(o.rejections), "failure": o.failure}
            for o in outcomes
        ],
    }


# --------------------------------------------------------------------------- running

#: the material's synthetic time (2025-01-15 10:00 UTC), one minute a piece: the prompt shows
#: each chunk's date, and a fixed one keeps runs comparable
BASE_TIME = 1_736_935_200.0
TENANT_ID = "eval"
SCHEMA_NAME = "extraction"


def source_key(source: str) -> SourceKey:
    """The corpus's `source` as the service names it."""
    if source.startswith("document:"):
        return SourceKey("document", source.removeprefix("document:"))
    if source == "email":
        return SourceKey("email", "email")
    return SourceKey("conversations", "conversations")


def item_chunks(item: EvalItem) -> list[Chunk]:
    """The item's material as the window the service would send, with synthetic evidence.

    A user turn starts a turn and the assistant turn after it is the same turn (one
    `TurnRecorded` holds both); each email is its own message; document pieces are chunks of
    the item's document. Texts are cleaned and bounded as the service's are.
    """
    session = f"eval-{item.id}"
    doc_id = source_key(item.source).id if item.source.startswith("document:") else item.id
    drafts: list[ChunkDraft] = []
    turn = 0
    previous: str | None = None
    for n, piece in enumerate(item.material, start=1):
        evidence: ChunkEvidence
        if piece.kind == "user_turn" or (piece.kind == "assistant_turn"
                                         and previous != "user_turn"):
            turn += 1
        if piece.kind in ("user_turn", "assistant_turn"):
            evidence = TurnRef(session_id=session, turn_id=f"t{turn}")
        elif piece.kind in ("sent_email", "received_email"):
            evidence = EmailMessageRef(message_id=f"<{item.id}.{n}@eval.invalid>")
        else:
            evidence = DocumentChunkRef(source_id=doc_id, chunk_id=f"chunk-{n}")
        drafts.append(ChunkDraft(piece.kind, evidence, bounded(clean_text(piece.text)),
                                 BASE_TIME + 60 * n))
        previous = piece.kind
    return window_chunks(drafts)


async def run_item(client: LlmClient, item: EvalItem) -> ItemOutcome:
    """One item through the service's path: chunks, prompt, call, validation, then the score."""
    chunks = item_chunks(item)
    system, user = extraction_messages(source_key(item.source), None, chunks)
    try:
        completion = await client.complete_json(
            tenant_id=TENANT_ID, system=system, user=user, schema=EXTRACTION_SCHEMA,
            schema_name=SCHEMA_NAME)
    except LlmError as exc:
        return score_item(item.id, item.expected, [], failure=exc.reason,
                          tokens_in=exc.tokens_in, tokens_out=exc.tokens_out)
    validated = validate_extraction(completion.data, chunks)
    predicted = [Facet(str(f.class_), f.key, f.value) for f in validated.facets]
    return score_item(item.id, item.expected, predicted,
                      rejections=[r.reason for r in validated.rejections],
                      tokens_in=completion.tokens_in, tokens_out=completion.tokens_out)


async def evaluate(client: LlmClient, items: Sequence[EvalItem], *,
                   concurrency: int = 4) -> list[ItemOutcome]:
    """Every item, at most `concurrency` calls at a time; outcomes in corpus order."""
    gate = asyncio.Semaphore(max(1, concurrency))

    async def one(item: EvalItem) -> ItemOutcome:
        async with gate:
            return await run_item(client, item)

    return list(await asyncio.gather(*(one(item) for item in items)))


async def _run(settings: LlmSettings, items: Sequence[EvalItem],
               concurrency: int) -> list[ItemOutcome]:
    client = LlmClient(settings, service="extractor_eval", budget=None)
    try:
        return await evaluate(client, items, concurrency=concurrency)
    finally:
        await client.aclose()


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m services.extractor.evaluate",
        description="Precision and recall of the extractor's facets on the labelled corpus, "
                    "against the endpoint in HABITUS_LLM_BASE_URL / HABITUS_LLM_MODEL.")
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS,
                        help=f"the labelled corpus (default {DEFAULT_CORPUS})")
    parser.add_argument("--concurrency", type=_positive, default=4,
                        help="calls in flight at once (default 4)")
    parser.add_argument("--json", type=Path, default=None, metavar="OUT",
                        help="also write the report and every item's outcome as JSON")
    parser.add_argument("--details", action="store_true",
                        help="also list each item's missed and spurious facets")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Exit 0 with the tables printed; 2 when no endpoint is configured or the corpus is
    unreadable; 1 when every call failed (the endpoint is down: no figure means anything)."""
    args = _parser().parse_args(argv)
    settings = LlmSettings()
    if not settings.enabled:
        print(f"extractor eval needs a real LLM endpoint ({settings.disabled_reason()}). Set "
              "HABITUS_LLM_BASE_URL (an OpenAI-compatible URL ending in /v1) and "
              "HABITUS_LLM_MODEL, and HABITUS_LLM_API_KEY if the server wants one.",
              file=sys.stderr)
        return 2
    try:
        items = load_corpus(args.corpus)
    except (OSError, CorpusError) as exc:
        print(f"extractor eval: cannot read the corpus {args.corpus}: {exc}", file=sys.stderr)
        return 2
    outcomes = asyncio.run(_run(settings, items, args.concurrency))
    report = summarise(outcomes)
    console = Console()
    console.print(f"model [bold]{settings.model}[/bold], prompt {EXTRACT_VERSION}, "
                  f"corpus {args.corpus}")
    for table in report_tables(report):
        console.print(table)
    if args.details:
        console.print(misses_table(outcomes))
    if args.json is not None:
        doc = {"model": settings.model, "prompt_version": EXTRACT_VERSION,
               **report_json(report, outcomes)}
        args.json.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n",
                             encoding="utf-8")
    if items and sum(report.failures.values()) == len(items):
        print("extractor eval: every call failed; see the failures above", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
