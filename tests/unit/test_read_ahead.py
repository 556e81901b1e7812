"""Statements read ahead, in a thread and in processes of their own: the same readings either
way (one set of cases for both placements), readings started ahead used, and a reader process
that dies costing a retry, never an event."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
from collections.abc import AsyncIterator
from typing import Any

import pytest

from habitus.projection.faults import DependencyUnavailable, is_about_the_event, is_transient
from services.producers.reading.ahead import ReadAhead, in_thread
from services.producers.reading.apart import ReaderProcesses, in_processes
from services.producers.reading.reader import Statement, StatementReader

pytestmark = pytest.mark.asyncio

MESSAGES = [
    "I'm based in Lisbon, so please use metric units.",
    "thanks, that works",
    "Keep answers short and never use emoji with me.",
    "can you look at the failing test in the parser module",
    "thanks, that works",  # the same text twice in a batch
    "",
    "We deploy everything to AWS and I write Rust.",
    "I realized I prefer terse answers. Going forward, skip the disclaimers.",
]

_READER: StatementReader | None = None


def reader() -> StatementReader:
    global _READER
    if _READER is None:
        _READER = StatementReader()
        _READER.warm()
    return _READER


def facets(read: list[list[Statement]]) -> list[set[tuple[str, str, str]]]:
    return [{(s.facet_class, s.key, s.value) for s in statements} for statements in read]


@pytest.fixture(scope="module")
async def processes() -> AsyncIterator[ReaderProcesses]:
    pool = ReaderProcesses(2)
    yield pool
    await pool.stop()


@pytest.fixture(params=["thread", "processes"])
def reading(request: Any, processes: ReaderProcesses) -> ReadAhead:
    return in_thread(reader()) if request.param == "thread" else in_processes(processes)


async def test_both_placements_read_what_the_reader_reads(reading: ReadAhead) -> None:
    read = facets(await reading.read(MESSAGES))
    assert read == facets(reader().read(MESSAGES))
    assert read[0] == {("identity", "location", "Lisbon"), ("style", "units", "metric")}
    assert read[6] == {("tooling", "cloud", "aws"), ("tooling", "language", "rust")}
    assert read[1] == read[4] == read[5] == set()


async def test_a_reading_started_ahead_is_what_the_apply_gets(reading: ReadAhead) -> None:
    reading.start(MESSAGES)
    assert facets(await reading.read(list(reversed(MESSAGES)))) == facets(
        reader().read(list(reversed(MESSAGES))))


class Counting:
    """The real reader in a thread, counting the texts each submission asks for."""

    def __init__(self) -> None:
        self.asked: list[list[str]] = []
        self.fail_next = False

    async def __call__(self, texts: list[str]) -> list[list[Statement]]:
        self.asked.append(texts)
        if self.fail_next:
            self.fail_next = False
            raise DependencyUnavailable("the reader stopped")
        return await asyncio.to_thread(reader().read, texts)


async def test_texts_started_ahead_are_not_read_again_and_each_text_is_read_once() -> None:
    submit = Counting()
    ahead = ReadAhead(submit)
    ahead.start(MESSAGES)
    read = await ahead.read([*MESSAGES, "Always answer in British English."])
    assert sorted(submit.asked) == sorted([list(dict.fromkeys(MESSAGES)),
                                           ["Always answer in British English."]])
    assert facets(read[:-1]) == facets(reader().read(MESSAGES))
    assert facets(read[-1:]) == [{("style", "language", "en-GB")}]


async def test_a_failed_reading_ahead_is_read_again_when_needed() -> None:
    submit = Counting()
    ahead = ReadAhead(submit)
    submit.fail_next = True
    ahead.start(MESSAGES)
    await asyncio.sleep(0.05)
    read = await ahead.read(MESSAGES)
    assert len(submit.asked) == 2
    assert facets(read) == facets(reader().read(MESSAGES))


async def test_only_the_last_readings_are_kept() -> None:
    submit = Counting()
    ahead = ReadAhead(submit, keep=2)
    for text in ("Please keep answers short.", "I use uv, not poetry.", "Never use emoji."):
        ahead.start([text])
    await ahead.read(["Please keep answers short.", "Never use emoji."])
    # the first was dropped, so read again; the third was used as started
    asked = [text for texts in submit.asked for text in texts]
    assert asked.count("Please keep answers short.") == 2 and asked.count("Never use emoji.") == 1


def children() -> set[multiprocessing.process.BaseProcess]:
    return set(multiprocessing.active_children())


async def test_a_reader_process_that_dies_costs_a_retry_and_a_new_process() -> None:
    others = children()
    pool = ReaderProcesses(1)
    try:
        reading = in_processes(pool)
        assert facets(await reading.read(MESSAGES[:3])) == facets(reader().read(MESSAGES[:3]))
        [worker] = children() - others
        os.kill(worker.pid or 0, signal.SIGKILL)
        worker.join(5)
        with pytest.raises(DependencyUnavailable) as failed:
            await reading.read(["I write Go at work."])
        assert is_transient(failed.value) and not is_about_the_event(failed.value)
        # the retry the runner makes: a new process reads it
        assert facets(await reading.read(MESSAGES)) == facets(reader().read(MESSAGES))
        [again] = children() - others
        assert again.pid != worker.pid
    finally:
        await pool.stop()
