"""`habitus dlq list` and `habitus dlq replay`: the dead letters in HABITUS_DLQ.

`list` shows why each was given up on and where it came from (its headers). `replay`
republishes a dead letter's original bytes to its original subject, in its original stream (the
consumer sees it again, at a new sequence; consumers that had applied it skip it by its event
id), then deletes it from HABITUS_DLQ. Fix the cause first: an event that still fails is
dead-lettered again. Both need HABITUS_NATS_URL, or a `habitus up` running here.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Annotated, Any

import typer
from rich.table import Table

from habitus.cli.connect import bus_settings, nats, run
from habitus.cli.gateway import fail
from habitus.cli.output import AsJson, console, cut, echo_json, iso, or_dash

dlq_app = typer.Typer(help="Dead letters (HABITUS_DLQ): list them, replay them.",
                      no_args_is_help=True)


@dataclass
class Letter:
    """A message of HABITUS_DLQ, as its headers describe it."""

    seq: int
    subject: str
    consumer: str
    reason: str
    detail: str
    original_stream: str
    original_subject: str
    original_seq: int | None
    deliveries: int | None
    at: float | None
    data: bytes

    @classmethod
    def of(cls, msg: Any) -> Letter:
        from habitus.projection import dlq as h

        headers: dict[str, str] = dict(msg.headers or {})

        def number(name: str) -> int | None:
            value = headers.get(name, "")
            return int(value) if value.isdigit() else None

        return cls(int(msg.seq), str(msg.subject), headers.get(h.CONSUMER, "?"),
                   headers.get(h.REASON, "?"),
                   opened_detail(headers.get(h.DETAIL, ""), headers.get(h.ORIGINAL_SUBJECT, "")),
                   headers.get(h.ORIGINAL_STREAM, ""), headers.get(h.ORIGINAL_SUBJECT, ""),
                   number(h.ORIGINAL_SEQ), number(h.DELIVERIES),
                   msg.time.timestamp() if msg.time else None, bytes(msg.data or b""))

    def summary(self) -> dict[str, Any]:
        doc = asdict(self)
        del doc["data"]
        try:
            event = json.loads(self.data)
        except ValueError:
            event = None
        doc["event_id"] = event.get("event_id") if isinstance(event, dict) else None
        doc["type"] = event.get("type") if isinstance(event, dict) else None
        return doc


def opened_detail(detail: str, original_subject: str) -> str:
    """The detail as the consumer wrote it: sealed with the user's key when the event was a
    user's (it can quote the event), unreadable once the user is erased."""
    from habitus.crypto.columns import COLUMNS, is_sealed
    from habitus.crypto.keyring import Shredded
    from habitus.subjects import parse_subject

    if not is_sealed(detail):
        return detail
    try:
        owner = parse_subject(original_subject)
        return COLUMNS.open(owner.tenant_id, owner.user_id, detail)
    except Shredded:
        return "(the user was erased: the detail is unreadable)"
    except (LookupError, ValueError) as exc:  # KeyMissing, SealError, a KEK not here
        return f"(sealed; cannot be opened here: {exc})"


def dlq_filter(consumer: str | None) -> str:
    from habitus.subjects import DLQ_ROOT

    if consumer is not None and (not consumer or any(c in consumer for c in ". *>\t\r\n")):
        raise ValueError(f"--consumer {consumer!r} cannot be a subject token")
    return f"{DLQ_ROOT}.{consumer}.>" if consumer else f"{DLQ_ROOT}.>"


async def letters(js: Any, consumer: str | None = None, limit: int | None = None
                  ) -> list[Letter]:
    """The dead letters (of one consumer), oldest first, at most `limit`."""
    from nats.js.errors import NotFoundError

    from habitus.bus.streams import DLQ

    subject, seq = dlq_filter(consumer), 1
    out: list[Letter] = []
    while limit is None or len(out) < limit:
        try:
            msg = await js.get_msg(DLQ, seq=seq, subject=subject, next=True)
        except NotFoundError:
            break
        out.append(Letter.of(msg))
        seq = int(msg.seq) + 1
    return out


async def letter_at(js: Any, seq: int) -> Letter | None:
    from nats.js.errors import NotFoundError

    from habitus.bus.streams import DLQ

    try:
        return Letter.of(await js.get_msg(DLQ, seq=seq))
    except NotFoundError:
        return None


@dataclass
class Replayed:
    dlq_seq: int
    consumer: str
    subject: str
    stream: str
    #: the republished message's sequence in its stream
    seq: int
    #: the stream had it already (a replay repeated within its duplicate window)
    duplicate: bool


async def replay_letter(js: Any, letter: Letter) -> Replayed:
    """Republish a dead letter's original bytes to its original subject and stream, then
    delete it from HABITUS_DLQ.

    The message id derives from the dead letter, not the event: the event's own id is still
    in the stream's duplicate window for a while, and would make the stream drop the copy; this
    one lets a replay repeated after a crash (published, not yet deleted) store nothing new."""
    from habitus.bus.streams import DLQ, EVENTS, INGEST
    from habitus.subjects import parse_subject

    if not letter.original_subject or letter.original_stream not in (EVENTS, INGEST):
        raise ValueError(f"dead letter {letter.seq} names no original subject and stream "
                         "(not written by a Habitus consumer?)")
    msg_id = f"dlq-replay:{letter.consumer}:{letter.original_stream}:{letter.original_seq}"
    # the subject as its publisher wrote it: the stream appends the partition tokens again
    subject = parse_subject(letter.original_subject).published
    ack = await js.publish(subject, letter.data, stream=letter.original_stream,
                           headers={"Nats-Msg-Id": msg_id})
    await js.delete_msg(DLQ, letter.seq)
    return Replayed(letter.seq, letter.consumer, subject, letter.original_stream, int(ack.seq),
                    bool(ack.duplicate))


@dlq_app.command("list")
def dlq_list(consumer: Annotated[str | None, typer.Option(
                 "--consumer", help="only this consumer's, e.g. proj_learning_cache")] = None,
             limit: Annotated[int, typer.Option("--limit", min=1, help="at most this many")
                              ] = 100,
             as_json: AsJson = False) -> None:
    """Dead letters, oldest first: why, and where each came from."""
    try:
        dlq_filter(consumer)
    except ValueError as exc:
        raise fail(str(exc)) from None
    settings = bus_settings("nats_url")
    from habitus.crypto.setup import keyring_from
    from habitus.events.catalog import install_keyring_once

    install_keyring_once(lambda: keyring_from(settings))  # a user's detail is sealed with their key

    async def go() -> list[Letter]:
        async with nats(settings, "habitus-dlq") as nc:
            return await letters(nc.jetstream(), consumer, limit)

    found = run(go)
    if as_json:
        echo_json([x.summary() for x in found])
        return
    if not found:
        console.print("no dead letters" + (f" of {consumer}" if consumer else ""))
        return
    table = Table("seq", "consumer", "reason", "original", "orig seq", "deliveries", "at",
                  "detail")
    for x in found:
        table.add_row(str(x.seq), x.consumer, x.reason, x.original_subject,
                      or_dash(x.original_seq), or_dash(x.deliveries), iso(x.at),
                      cut(x.detail, 120))
    console.print(table)
    if any(len(x.detail) > 120 for x in found):
        console.print("details cut at 120 characters; --json has them whole", style="dim")


@dlq_app.command("replay")
def dlq_replay(seq: Annotated[int | None, typer.Argument(
                   help="the dead letter's sequence in HABITUS_DLQ (see `habitus dlq list`)")
                   ] = None,
               consumer: Annotated[str | None, typer.Option(
                   "--consumer", help="every dead letter of this consumer")] = None,
               as_json: AsJson = False) -> None:
    """Send dead letters back to their original subject (the consumer sees them again), then
    delete them from HABITUS_DLQ. Fix the cause first: one that fails again comes back."""
    if (seq is None) == (consumer is None):
        raise fail("give a dead letter's sequence or --consumer C (one of them)")
    try:
        dlq_filter(consumer)
    except ValueError as exc:
        raise fail(str(exc)) from None
    settings = bus_settings("nats_url")

    async def go() -> list[Replayed]:
        async with nats(settings, "habitus-dlq-replay") as nc:
            js = nc.jetstream()
            if seq is not None:
                one = await letter_at(js, seq)
                if one is None:
                    raise LookupError(f"no dead letter at HABITUS_DLQ sequence {seq}")
                chosen = [one]
            else:
                chosen = await letters(js, consumer)
            return [await replay_letter(js, x) for x in chosen]

    try:
        done = run(go)
    except (LookupError, ValueError) as exc:
        raise fail(str(exc)) from None
    if as_json:
        echo_json([asdict(x) for x in done])
        return
    for r in done:
        again = " (already there: replayed before)" if r.duplicate else ""
        console.print(f"dlq {r.dlq_seq} ({r.consumer}) -> {r.subject} at {r.stream} sequence "
                      f"{r.seq}{again}; deleted from HABITUS_DLQ", soft_wrap=True)
    if not done:
        console.print(f"no dead letters of {consumer}")
