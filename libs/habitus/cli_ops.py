"""Operator commands on the bus and the database: `habitus events tail`, `habitus lag`,
`habitus dlq list` and `habitus dlq replay`.

They need HABITUS_NATS_URL (and HABITUS_DATABASE_URL for `lag`); when those are unset and a
`habitus up` runs on the same data directory, its servers are used, as for `habitus replay`.

* `events tail` reads HABITUS_EVENTS the way a subscriber sees it: an ephemeral ordered consumer
  from now (or from the start), one line per event.
* `lag` compares, per projection, the stream's last sequence on the projection's subjects with
  its checkpoint row (`<schema>.projection_checkpoints`), and shows its durable consumer's
  pending and unacknowledged deliveries and its dead letters in HABITUS_DLQ.
* `dlq replay` republishes a dead letter's original bytes to its original subject, in its
  original stream (the consumer sees it again, at a new sequence; consumers that had applied it
  skip it by its event id), then deletes it from HABITUS_DLQ. Fix the cause first: an event
  that still fails is dead-lettered again.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import sys
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import asdict, dataclass
from typing import Annotated, Any, TypeVar

import typer
from rich.table import Table

from habitus.cli_gateway import fail
from habitus.cli_output import console, echo_json
from habitus.config import Settings, get_settings

events_app = typer.Typer(help="The event log, live (HABITUS_EVENTS).", no_args_is_help=True)
dlq_app = typer.Typer(help="Dead letters (HABITUS_DLQ): list them, replay them.",
                      no_args_is_help=True)
T = TypeVar("T")

AsJson = Annotated[bool, typer.Option("--json", help="print the answer as JSON")]


# ---------------------------------------------------------------------------- connections


def live_settings(keys: tuple[str, ...] = ("nats_url", "database_url", "redis_url")
                  ) -> Settings:
    """Settings, with the URLs among `keys` the environment leaves unset taken from a live
    `habitus up` on the same data directory. Its runtime.json can be stale (a `habitus up`
    that was killed) or name a server that is down: that is one clear line and exit 2 at once,
    not a connect timeout and a pool traceback."""
    settings = get_settings()
    from habitus.runtime.state import Unavailable, live_urls

    missing = [name for name in keys if not getattr(settings, name)]
    if not missing:
        return settings
    try:
        live = live_urls(settings.data_dir.resolve(), missing)
    except Unavailable as exc:
        raise fail(str(exc)) from None
    return settings.model_copy(update={k: live.get(k) for k in missing})


def bus_settings(*needed: str) -> Settings:
    """`live_settings` of the `needed` URLs (`nats_url`, `database_url`), each required: a
    missing or unreachable one is one line and exit 2."""
    settings = live_settings(needed)
    for name in needed:
        if not getattr(settings, name):
            raise fail(f"HABITUS_{name.upper()} is not set and no `habitus up` is running "
                       "here: start one (`habitus up`) or set it")
    return settings


def where(url: str) -> str:
    """A server URL without its credentials, to print."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()


@contextlib.asynccontextmanager
async def _nats(settings: Settings, name: str) -> AsyncIterator[Any]:
    from habitus.bus import connect

    async def quiet(exc: Exception) -> None:
        return None  # a failed connect is reported below, once

    url = str(settings.nats_url)
    try:
        nc = await connect(url, name, max_reconnect_attempts=1, connect_timeout=3,
                           allow_reconnect=False, error_cb=quiet)
    except Exception as exc:  # nats raises several kinds for "not there"
        raise fail(f"cannot reach NATS at {where(url)} ({type(exc).__name__}: {exc}): is it "
                   "running? (`habitus up` starts one)") from None
    try:
        yield nc
    finally:
        with contextlib.suppress(Exception):
            await nc.close()


def _run(main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return asyncio.run(main())


def _iso(epoch: float | None) -> str:
    if epoch is None:
        return "-"
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).isoformat(
        timespec="milliseconds").replace("+00:00", "Z")


def cut(text: str, width: int) -> str:
    """`text`, or its first `width` - 1 characters and an ellipsis: visibly shortened."""
    return text if len(text) <= width else text[:width - 1] + "…"


def short(value: Any, width: int = 100) -> str:
    """Compact JSON on one line, cut to `width` characters (with an ellipsis)."""
    return cut(json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str), width)


# ---------------------------------------------------------------------------- events tail


def event_filter(event_type: str | None, tenant: str | None, user: str | None) -> str:
    """The HABITUS_EVENTS subject filter for a type, a tenant and a user (each optional)."""
    from habitus.subjects import EVENT_ROOT, user_filter

    for value, what in ((event_type, "--type"), (tenant, "--tenant"), (user, "--user")):
        if value is not None and (not value or any(c in value for c in ". *>\t\r\n")):
            raise ValueError(f"{what} {value!r} cannot be a subject token")
    return user_filter(EVENT_ROOT, event_type or "*", tenant or "*", user or "*")


def event_json(data: bytes, subject: str, seq: int | None) -> str:
    """One message of the log as one line of JSON: `{"seq", "subject", "event"}`, the event
    whole (`event` is null and `data` holds the text for a message that is not an event)."""
    try:
        doc = json.loads(data)
    except ValueError:
        doc = None
    line: dict[str, Any] = {"seq": seq, "subject": subject}
    if isinstance(doc, dict):
        line["event"] = doc
    else:
        line.update(event=None, data=data.decode(errors="replace"))
    return json.dumps(line, separators=(",", ":"), ensure_ascii=False)


def event_line(data: bytes, subject: str, seq: int | None) -> str:
    """`<time>  <seq>  <Type>  <tenant>/<user>  <payload>` for one message of the log."""
    try:
        doc = json.loads(data)
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        return f"-  {seq}  (not an event)  {subject}  {short(data.decode(errors='replace'))}"
    occurred = doc.get("occurred_at")
    at = _iso(float(occurred)) if isinstance(occurred, int | float) else "-"
    return (f"{at}  {seq}  {doc.get('type', '?')}  {doc.get('tenant_id', '?')}/"
            f"{doc.get('user_id', '?')}  {short(doc.get('payload'))}")


@events_app.command("tail")
def tail(event_type: Annotated[str | None, typer.Option(
             "--type", help="only this event type, e.g. FacetUpdated")] = None,
         user: Annotated[str | None, typer.Option("--user", help="only this user")] = None,
         tenant: Annotated[str | None, typer.Option("--tenant", help="only this tenant")
                           ] = None,
         from_start: Annotated[bool, typer.Option(
             "--from-start", help="from the first event kept, not from now")] = False,
         count: Annotated[int | None, typer.Option(
             "--count", min=1, help="stop after this many events")] = None,
         timeout: Annotated[float | None, typer.Option(
             "--timeout", min=0, help="stop after this many seconds")] = None,
         as_json: Annotated[bool, typer.Option(
             "--json", help="one JSON object per event: its sequence, subject and the whole "
                            "event")] = False) -> None:
    """Print events as a subscriber sees them, one line each (Ctrl-C stops)."""
    render = event_json if as_json else event_line
    try:
        subject = event_filter(event_type, tenant, user)
    except ValueError as exc:
        raise fail(str(exc)) from None
    settings = bus_settings("nats_url")

    async def go() -> int:
        from nats.errors import TimeoutError as NatsTimeout
        from nats.js.api import DeliverPolicy

        from habitus.bus.streams import EVENTS

        seen = 0
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        async with _nats(settings, "habitus-events-tail") as nc:
            sub = await nc.jetstream().subscribe(
                subject, stream=EVENTS, ordered_consumer=True,
                deliver_policy=DeliverPolicy.ALL if from_start else DeliverPolicy.NEW)
            try:
                while count is None or seen < count:
                    wait = 1.0 if deadline is None else min(1.0, deadline - loop.time())
                    if wait <= 0:
                        break
                    try:
                        msg = await sub.next_msg(timeout=wait)
                    except NatsTimeout:
                        continue
                    seq = msg.metadata.sequence.stream if msg.metadata else None
                    typer.echo(render(msg.data, msg.subject, seq))
                    sys.stdout.flush()
                    seen += 1
            finally:
                with contextlib.suppress(Exception):
                    await sub.unsubscribe()
        return seen

    with contextlib.suppress(KeyboardInterrupt):
        _run(go)


# ---------------------------------------------------------------------------- lag


@dataclass
class Lag:
    projection: str
    schema: str
    stream: str
    durable: str
    #: the stream's last sequence on the projection's subjects (0: none there)
    stream_seq: int
    #: the checkpoint row's last_seq; None: no row (never claimed) or no table
    checkpoint: int | None
    #: the durable consumer's undelivered and unacknowledged messages; None: no consumer
    pending: int | None
    ack_pending: int | None
    dead_letters: int

    @property
    def behind(self) -> int | None:
        """Stream sequences between the checkpoint and the last event it reads (0: caught
        up); not a count of events (other subjects' events lie in between)."""
        return None if self.checkpoint is None else max(0, self.stream_seq - self.checkpoint)


def durable_of(name: str) -> str:
    """The durable consumer of a projection (as `Projection.durable` names it)."""
    from habitus.projection.registry import resolve

    try:
        return resolve(name).durable
    except Exception:
        return "proj_" + name.replace(".", "_").replace("-", "_")


async def last_seq_on(js: Any, stream: str, subjects: list[str]) -> int:
    """The highest stream sequence of a message on any of `subjects` (wildcards allowed)."""
    from nats.js.errors import NotFoundError

    best = 0
    for subject in subjects:
        try:
            msg = await js.get_last_msg(stream, subject)
        except NotFoundError:
            continue
        best = max(best, int(msg.seq or 0))
    return best


async def dlq_counts(js: Any) -> dict[str, int]:
    """Dead letters in HABITUS_DLQ per consumer (from the subjects' counts)."""
    from habitus.bus.streams import DLQ
    from habitus.subjects import DLQ_ROOT

    info = await js.stream_info(DLQ, subjects_filter=f"{DLQ_ROOT}.>")
    counts: dict[str, int] = {}
    prefix = DLQ_ROOT + "."
    for subject, n in (info.state.subjects or {}).items():
        consumer = subject.removeprefix(prefix).split(".", 1)[0]
        counts[consumer] = counts.get(consumer, 0) + int(n)
    return counts


async def checkpoints(database_url: str, projections: list[tuple[str, str]]
                      ) -> dict[tuple[str, str], int]:
    """(schema, projection) -> its checkpoint, for those of `projections` with a row (a
    schema not migrated has none)."""
    import psycopg

    from habitus.projection.checkpoints import CheckpointStore

    out: dict[tuple[str, str], int] = {}
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        for schema, name in projections:
            try:
                last = await CheckpointStore(schema).last_seq(conn, name)
            except psycopg.errors.UndefinedTable:
                continue
            if last is not None:
                out[(schema, name)] = last
    return out


async def measure(nc: Any, database_url: str, names: list[str] | None = None) -> list[Lag]:
    """The lag of every installed projection (or of `names`), in flow order."""
    from nats.js.errors import NotFoundError

    from habitus.topology import current

    infos = current().in_flow_order()
    if names:
        unknown = sorted(set(names) - {p.name for p in infos})
        if unknown:
            raise LookupError(f"unknown projection(s) {', '.join(unknown)} (known: "
                              f"{', '.join(sorted(p.name for p in infos))})")
        infos = [p for p in infos if p.name in names]
    js = nc.jetstream()
    rows = await checkpoints(database_url, [(p.schema, p.name) for p in infos])
    dead = await dlq_counts(js)
    out = []
    for p in infos:
        durable = durable_of(p.name)
        pending: int | None
        ack_pending: int | None
        try:
            info = await js.consumer_info(p.stream, durable)
            pending, ack_pending = int(info.num_pending or 0), int(info.num_ack_pending or 0)
        except NotFoundError:
            pending = ack_pending = None
        out.append(Lag(p.name, p.schema, p.stream, durable,
                       await last_seq_on(js, p.stream, p.filter_subjects()),
                       rows.get((p.schema, p.name)), pending, ack_pending,
                       dead.get(durable, 0)))
    return out


def _n(value: int | None) -> str:
    return "-" if value is None else str(value)


def lag(projection: Annotated[list[str] | None, typer.Argument(
            help="only these projections (default: every installed one)")] = None,
        as_json: AsJson = False) -> None:
    """Per projection: the stream's last sequence on its subjects against its checkpoint, its
    consumer's pending and unacknowledged deliveries, and its dead letters."""
    settings = bus_settings("nats_url", "database_url")

    async def go() -> list[Lag]:
        async with _nats(settings, "habitus-lag") as nc:
            return await measure(nc, str(settings.database_url), projection)

    import psycopg

    try:
        lags = _run(go)
    except LookupError as exc:
        raise fail(str(exc)) from None
    except psycopg.OperationalError as exc:
        raise fail(f"cannot reach Postgres at {where(str(settings.database_url))} ({exc}): "
                   "is it running? "
                   "(`habitus up` starts one)") from None
    if as_json:
        echo_json([{**asdict(x), "behind": x.behind} for x in lags])
        return
    table = Table("projection", "stream", "last seq", "checkpoint", "behind", "pending",
                  "ack pending", "dlq")
    for x in lags:
        behind = x.behind
        style = "" if not behind and not x.dead_letters else "yellow"
        table.add_row(x.projection, x.stream.removeprefix("HABITUS_"), str(x.stream_seq),
                      _n(x.checkpoint), _n(behind), _n(x.pending), _n(x.ack_pending),
                      str(x.dead_letters), style=style)
    console.print(table)


# ---------------------------------------------------------------------------- dlq


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
                   headers.get(h.REASON, "?"), headers.get(h.DETAIL, ""),
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

    if not letter.original_subject or letter.original_stream not in (EVENTS, INGEST):
        raise ValueError(f"dead letter {letter.seq} names no original subject and stream "
                         "(not written by a Habitus consumer?)")
    msg_id = f"dlq-replay:{letter.consumer}:{letter.original_stream}:{letter.original_seq}"
    ack = await js.publish(letter.original_subject, letter.data, stream=letter.original_stream,
                           headers={"Nats-Msg-Id": msg_id})
    await js.delete_msg(DLQ, letter.seq)
    return Replayed(letter.seq, letter.consumer, letter.original_subject,
                    letter.original_stream, int(ack.seq), bool(ack.duplicate))


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

    async def go() -> list[Letter]:
        async with _nats(settings, "habitus-dlq") as nc:
            return await letters(nc.jetstream(), consumer, limit)

    found = _run(go)
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
                      _n(x.original_seq), _n(x.deliveries), _iso(x.at), cut(x.detail, 120))
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
        async with _nats(settings, "habitus-dlq-replay") as nc:
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
        done = _run(go)
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
