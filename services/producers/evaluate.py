"""Precision and recall of the statement reader on the labelled corpus.

`python -m services.producers.evaluate` (`make eval-statements`) reads
`examples/eval/statements.jsonl`, runs the reader over the held-out part (`split: test`) and
prints precision and recall per class on (class, key, value), the same with the stance
(standing or one-off) required to match, and every miss: what was expected and not found, and
what was found and not expected. `--tune` searches the classifier's thresholds on the tuning
data only (the corpus's `split: tune` part and `statements_tune_extra*.jsonl`, two more sets
written apart from it) and writes them to `services/producers/reading/thresholds.json`; the
held-out part never informs them. `--split tune` reports on the tuning data instead.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from habitus.events.domain import Stance
from services.producers.reading import intents
from services.producers.reading.intents import Thresholds
from services.producers.reading.reader import StatementReader

CORPUS = Path(__file__).parents[2] / "examples" / "eval" / "statements.jsonl"
#: more tuning sentences, written apart from the corpus (never evaluated on)
TUNE_EXTRA = (CORPUS.with_name("statements_tune_extra.jsonl"),
              CORPUS.with_name("statements_tune_extra2.jsonl"))
Triple = tuple[str, str, str]


@dataclass
class Score:
    tp: Counter[str] = field(default_factory=Counter)
    fp: Counter[str] = field(default_factory=Counter)
    fn: Counter[str] = field(default_factory=Counter)

    def add(self, expected: set[Triple], found: set[Triple]) -> None:
        for t in expected & found:
            self.tp[t[0]] += 1
        for t in found - expected:
            self.fp[t[0]] += 1
        for t in expected - found:
            self.fn[t[0]] += 1

    def precision(self, cls: str | None = None) -> float:
        tp, fp = self._sum(self.tp, cls), self._sum(self.fp, cls)
        return tp / (tp + fp) if tp + fp else 1.0

    def recall(self, cls: str | None = None) -> float:
        tp, fn = self._sum(self.tp, cls), self._sum(self.fn, cls)
        return tp / (tp + fn) if tp + fn else 1.0

    @staticmethod
    def _sum(counter: Counter[str], cls: str | None) -> int:
        return sum(counter.values()) if cls is None else counter[cls]


def load(path: Path = CORPUS, split: str | None = None) -> list[dict[str, object]]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]
    return [r for r in rows if split is None or r["split"] == split]


def _expected(row: dict[str, object], stance: bool) -> set[tuple[str, ...]]:
    out: set[tuple[str, ...]] = set()
    for e in row["expect"]:  # type: ignore[attr-defined]
        t = (e["class"], e["key"], e["value"])
        out.add((*t, str(bool(e["standing"]))) if stance else t)
    return out


def evaluate(rows: Sequence[dict[str, object]], reader: StatementReader
             ) -> tuple[Score, Score, list[str]]:
    """(score on triples, score with stance, the misses as lines)."""
    found_all = reader.read([str(r["text"]) for r in rows])
    plain, strict, misses = Score(), Score(), []
    for row, said in zip(rows, found_all, strict=True):
        # the corpus labels what is stated; what a user takes back (a denial) is not labelled
        # here, and its tests are the reader's unit tests
        statements = [s for s in said if s.stance is not Stance.DENIED]
        found = {(s.facet_class, s.key, s.value) for s in statements}
        found_stance = {(s.facet_class, s.key, s.value, str(s.standing)) for s in statements}
        expected = _expected(row, False)
        plain.add(expected, found)  # type: ignore[arg-type]
        strict.add(_expected(row, True), found_stance)  # type: ignore[arg-type]
        if expected != found:
            missing = sorted(expected - found)
            extra = sorted(found - expected)
            misses.append(f"{row['id']}: {row['text']!r}\n    missed {missing}  extra {extra}")
    return plain, strict, misses


def tuning_rows(corpus: Path = CORPUS) -> list[dict[str, object]]:
    """Every sentence the reader may be tuned on: the corpus's tuning part and the extra set."""
    extra = [row for path in TUNE_EXTRA if corpus == CORPUS and path.exists()
             for row in load(path)]
    return load(corpus, "tune") + extra


def tune(rows: Sequence[dict[str, object]]) -> Thresholds:
    """The thresholds with the best F1 on `rows` among those with precision >= 0.95 (the
    target precision; below it, F1 counts for nothing)."""
    reader = StatementReader()
    best: tuple[float, Thresholds] | None = None
    for k, sim, margin in itertools.product((1, 3, 5), (0.45, 0.5, 0.55, 0.6, 0.65),
                                            (0.0, 0.1, 0.2, 0.3)):
        reader.classifier.thresholds = Thresholds(k, sim, margin)
        score, _, _ = evaluate(rows, reader)
        p, r = score.precision(), score.recall()
        f1 = 2 * p * r / (p + r) if p + r else 0.0
        objective = f1 if p >= 0.95 else f1 - 1.0
        if best is None or objective > best[0]:
            best = (objective, Thresholds(k, sim, margin))
    assert best is not None
    return best[1]


def report(plain: Score, strict: Score, misses: Sequence[str], n: int) -> str:
    lines = [f"sentences: {n}", "",
             f"{'class':10} {'precision':>9} {'recall':>7}   (class, key, value)"]
    classes = sorted(set(plain.tp) | set(plain.fp) | set(plain.fn))
    for cls in [*classes, None]:
        name = cls or "all"
        lines.append(f"{name:10} {plain.precision(cls):9.3f} {plain.recall(cls):7.3f}")
    lines += ["", f"with the stance (standing or one-off) required: precision "
                  f"{strict.precision():.3f}, recall {strict.recall():.3f}", "",
              f"misses ({len(misses)}):", *misses]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--tune", action="store_true",
                        help="search the thresholds on the tuning data and write them")
    parser.add_argument("--split", choices=("test", "tune"), default="test",
                        help="report on the held-out part (default) or the tuning data")
    args = parser.parse_args(argv)
    if args.tune:
        chosen = tune(tuning_rows(args.corpus))
        intents.THRESHOLDS.write_text(json.dumps(
            {"k": chosen.k, "min_similarity": chosen.min_similarity, "margin": chosen.margin},
            indent=2) + "\n")
        print(f"wrote {intents.THRESHOLDS}: {chosen}")
    rows = load(args.corpus, "test") if args.split == "test" else tuning_rows(args.corpus)
    plain, strict, misses = evaluate(rows, StatementReader())
    print(report(plain, strict, misses, len(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
