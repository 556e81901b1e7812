"""Subscribe to Habitus domain events from another service, each handled exactly once.

An outside service (a CRM sync, a dashboard, an audit trail) follows two event types from every
tenant on the event log, stream `HABITUS_EVENTS`:

* `CacheRebuilt`: a user's learned preferences changed; the payload carries the whole active set.
* `ToolRuleUpserted`: a tool-scoped rule was created or replaced; the payload is the whole rule.

It needs nothing but nats-py (`pip install nats-py`) for the envelope: the events are JSON
(`--decode json` shows the raw route). A user's payloads are sealed with that user's key
(crypto-shredding: erasing the user destroys the key), so reading them takes the `habitus`
package and the deployment's key store: `--decode habitus` (the default when it is importable)
opens them, validates each event against the catalog and upcasts an old payload version to the
current one. The raw route sees a sealed payload as sealed, and says so.

Run it next to `make run` (which prints its NATS URL; this script also finds it in
`./var/runtime.json`):

    .venv/bin/python examples/subscriber.py --durable crm_sync   # state: var/crm_sync.sqlite

How each event is handled exactly once, across crashes and restarts
-------------------------------------------------------------------

1. **Position.** The subscription is a durable JetStream pull consumer of this service's own
   (`--durable`), filtered to the two subjects, with explicit acks. JetStream keeps its
   position on the server: the ack floor. A restart (or a crash) resumes after the last acked
   event; an event delivered but not acked is delivered again once `--ack-wait` passed.
   Nothing is missed: an event is acked only after it was handled. Events are handled one at
   a time in stream order; a failure stops the batch (the rest is handed back), so a later
   event never overtakes an earlier one.

2. **Effect and dedupe in one transaction.** Acking after handling makes delivery
   at-least-once: a crash after handling but before the ack delivers the event again. So
   the handler's effect (here: rows in a local SQLite file, `--state`) and the event's id in
   the `processed` table are written in one SQLite transaction, before the ack. On
   delivery, an id already in `processed` means "done": it is acked without being handled
   again. A crash before the commit leaves neither effect nor id (the event comes again and
   is handled then); after the commit, both are there (the event comes again and is skipped).
   Either way the effect happens once. The id is `(tenant_id, user_id, event_id)`, the same
   scope as the stream's own `Nats-Msg-Id` deduplication.

3. **Past the stream's duplicate window.** JetStream drops a re-published event only within
   its duplicate window (2 minutes); a producer retrying later stores a second copy with a
   new stream sequence. The `processed` table recognises it by its `event_id` whenever it comes,
   so ids are kept, not pruned (a row per event: small).

4. **Losing one of the two.** If the durable is deleted while the state file remains, it is
   recreated at the sequence after the highest one handled (everything below it was handled,
   in order). If the state file is lost while the durable remains, the durable's ack floor still
   holds the position: nothing is redelivered except unacked events.

The guarantee holds for effects inside the transaction. An effect outside it (an HTTP call,
an email) cannot commit with the id: pass the `event_id` to it as an idempotency key, or accept
at-least-once for it. The print after each commit is such an effect: a crash right after the
commit loses the line (the rows are there), a restart never prints an event twice.

Run one process per durable and state file (a second one on the same state file refuses to
start); two services that both want every event use two durables.

Options: `--nats-url` (default `$HABITUS_NATS_URL`, else the running `habitus up`'s, else
`nats://127.0.0.1:4222`), `--durable`, `--state`, `--max N` (stop after N newly handled
events), `--from all|new` (where a durable created now starts), `--tenant` (only these
tenants; every tenant by default), `--ack-wait`, `--batch`,
`--decode`, `--slow` (sleep between commit and ack: widens the window a crash test aims at).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import json
import os
import signal
import sqlite3
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError

STREAM = "HABITUS_EVENTS"
TYPES = ("CacheRebuilt", "ToolRuleUpserted")


def filters(tenants: list[str] | None) -> list[str]:
    """`habitus.v1.event.<Type>.<tenant>.<user>`, as the stream stores it (followed by the
    user's and the tenant's partition slots, hence the `>`): the two types, every user of
    every tenant (or of the tenants given)."""
    return [f"habitus.v1.event.{t}.{tenant}.>" for t in TYPES for tenant in tenants or ["*"]]


# --------------------------------------------------------------------------- decoding


@dataclass(frozen=True)
class Incoming:
    """What the handler needs of an event, whichever way it was decoded."""

    event_id: str
    type: str
    tenant_id: str
    user_id: str
    occurred_at: float
    #: None when the payload is sealed and this route cannot open it
    payload: dict[str, Any] | None
    stream_seq: int


def decode_json(msg: Msg, seq: int) -> Incoming:
    """The raw route: the envelope is plain JSON (see ARCHITECTURE.md, "Events")."""
    doc = json.loads(msg.data)
    payload = doc["payload"] if isinstance(doc["payload"], dict) else None  # sealed: a string
    return Incoming(event_id=str(doc["event_id"]), type=str(doc["type"]),
                    tenant_id=str(doc["tenant_id"]), user_id=str(doc["user_id"]),
                    occurred_at=float(doc["occurred_at"]), payload=payload,
                    stream_seq=seq)


def decode_habitus(msg: Msg, seq: int) -> Incoming:
    """The catalog's route: opened with the key store (HABITUS_KEYSTORE_DIR, as the services
    read it), validated, and an old schema version upcast to the current one."""
    from habitus.config import get_settings
    from habitus.crypto.setup import keyring_from
    from habitus.events import CATALOG, install_keyring

    if CATALOG.keyring is None:
        install_keyring(keyring_from(get_settings()))
    event = CATALOG.decode_message(msg.data, msg.headers)
    return Incoming(event_id=event.event_id, type=event.type, tenant_id=event.tenant_id,
                    user_id=event.user_id, occurred_at=event.occurred_at,
                    payload=event.payload.model_dump(mode="json", by_alias=True),
                    stream_seq=seq)


def pick_decoder(name: str) -> Any:
    if name == "auto":
        try:
            import habitus.events  # noqa: F401
        except ImportError:
            return decode_json
        return decode_habitus
    return decode_habitus if name == "habitus" else decode_json


# --------------------------------------------------------------------------- the local store


SCHEMA = """
CREATE TABLE IF NOT EXISTS processed (          -- the dedupe store: one row per handled event
    tenant_id TEXT NOT NULL, user_id TEXT NOT NULL, event_id TEXT NOT NULL,
    type TEXT NOT NULL, stream_seq INTEGER NOT NULL, handled_at REAL NOT NULL,
    PRIMARY KEY (tenant_id, user_id, event_id));
-- The handler's effects (replace them with yours; keep them in the same transaction).
CREATE TABLE IF NOT EXISTS activity (           -- an append-only feed: one line per event
    n INTEGER PRIMARY KEY AUTOINCREMENT, tenant_id TEXT NOT NULL, user_id TEXT NOT NULL,
    event_id TEXT NOT NULL, type TEXT NOT NULL, line TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS preferences (        -- each user's active facets, as last rebuilt
    tenant_id TEXT NOT NULL, user_id TEXT NOT NULL, as_of REAL NOT NULL, active TEXT NOT NULL,
    PRIMARY KEY (tenant_id, user_id));
CREATE TABLE IF NOT EXISTS tool_rules (         -- rules as last upserted (deletes not followed)
    tenant_id TEXT NOT NULL, user_id TEXT NOT NULL, rule_id TEXT NOT NULL,
    tool_name TEXT NOT NULL, priority TEXT NOT NULL, rule TEXT NOT NULL,
    PRIMARY KEY (tenant_id, user_id, rule_id));
"""


class Store:
    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        # One process per state file: a second one would handle redeliveries it cannot see.
        self._lock = open(path.with_name(path.name + ".lock"), "w")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SystemExit(f"{path} is in use by another subscriber") from None
        # Autocommit mode: transactions are opened explicitly (BEGIN IMMEDIATE ... COMMIT).
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")  # a commit survives a power cut
        self.db.executescript(SCHEMA)

    def last_seq(self) -> int:
        row = self.db.execute("SELECT MAX(stream_seq) FROM processed").fetchone()
        return int(row[0] or 0)

    def apply(self, event: Incoming) -> str | None:
        """Handle the event unless it was handled before: the effect and its id commit
        together. Returns the line to print, or None for an event already handled."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            seen = self.db.execute(
                "SELECT 1 FROM processed WHERE tenant_id=? AND user_id=? AND event_id=?",
                (event.tenant_id, event.user_id, event.event_id)).fetchone()
            if seen:
                self.db.execute("ROLLBACK")
                return None
            line = handle(self.db, event)
            self.db.execute(
                "INSERT INTO activity (tenant_id, user_id, event_id, type, line)"
                " VALUES (?, ?, ?, ?, ?)",
                (event.tenant_id, event.user_id, event.event_id, event.type, line))
            self.db.execute(
                "INSERT INTO processed VALUES (?, ?, ?, ?, ?, ?)",
                (event.tenant_id, event.user_id, event.event_id, event.type,
                 event.stream_seq, time.time()))
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        return line


# --------------------------------------------------------------------------- the handler


def handle(db: sqlite3.Connection, event: Incoming) -> str:
    """This service's work for one event, inside the store's transaction. Replace it with
    yours; whatever must happen once goes through `db` (or takes `event.event_id` as an
    idempotency key). Returns a line describing what it did."""
    p = event.payload
    who = f"{event.tenant_id}/{event.user_id}"
    if p is None:
        return (f"{event.type} {who}: payload sealed (read it with --decode habitus and the "
                "deployment's key store)")
    if event.type == "CacheRebuilt":
        active = p.get("active", [])
        db.execute(
            "INSERT INTO preferences VALUES (?, ?, ?, ?) ON CONFLICT (tenant_id, user_id)"
            " DO UPDATE SET as_of=excluded.as_of, active=excluded.active",
            (event.tenant_id, event.user_id, float(p["as_of"]), json.dumps(active)))
        facets = ", ".join(f"{f['class']}.{f['key']}={f['value']}" for f in active) or "none"
        return (f"CacheRebuilt {who}: +{p['added']} -{p['evicted']} ={p['kept']}, "
                f"active: {facets}")
    if event.type == "ToolRuleUpserted":
        priority = str(p.get("priority", "normal"))
        db.execute(
            "INSERT INTO tool_rules VALUES (?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (tenant_id, user_id, rule_id) DO UPDATE SET"
            " tool_name=excluded.tool_name, priority=excluded.priority, rule=excluded.rule",
            (event.tenant_id, event.user_id, p["rule_id"], p["tool_name"], priority, p["rule"]))
        return f"ToolRuleUpserted {who}: [{priority}] {p['tool_name']}: {p['rule']}"
    return f"{event.type} {who}: not followed"  # outside the filter: never delivered


# --------------------------------------------------------------------------- the consumer


def default_nats_url() -> str:
    if os.environ.get("HABITUS_NATS_URL"):
        return os.environ["HABITUS_NATS_URL"]
    runtime = Path(os.environ.get("HABITUS_DATA_DIR", "var")) / "runtime.json"
    with contextlib.suppress(OSError, ValueError):
        url = json.loads(runtime.read_text()).get("nats_url")
        if isinstance(url, str) and url:
            return url
    return "nats://127.0.0.1:4222"


async def ensure_consumer(js: Any, durable: str, subjects: list[str], store: Store,
                          start: str, ack_wait: float) -> str:
    """The durable as it is (its ack floor is the position), or created now."""
    try:
        info = await js.consumer_info(STREAM, durable)
    except NotFoundError:
        pass
    else:
        floor = info.ack_floor.stream_seq if info.ack_floor else 0
        return f"resuming after stream seq {floor}, {info.num_pending} pending"
    last = store.last_seq()
    config = ConsumerConfig(durable_name=durable, filter_subjects=subjects,
                            ack_policy=AckPolicy.EXPLICIT, ack_wait=ack_wait,
                            max_ack_pending=1000)
    if last:  # the durable is gone but we know how far we got
        config.deliver_policy, config.opt_start_seq = DeliverPolicy.BY_START_SEQUENCE, last + 1
        where = f"created at stream seq {last + 1} (after the last handled)"
    elif start == "new":
        config.deliver_policy, where = DeliverPolicy.NEW, "created at the stream's end"
    else:
        config.deliver_policy, where = DeliverPolicy.ALL, "created at the stream's start"
    await js.add_consumer(STREAM, config)
    return where


async def run(args: argparse.Namespace) -> int:
    store = Store(Path(args.state))
    decode = pick_decoder(args.decode)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    nc = await nats.connect(args.nats_url, name=f"subscriber-{args.durable}",
                            max_reconnect_attempts=-1)
    js = nc.jetstream()
    subjects = filters(args.tenant)
    where = await ensure_consumer(js, args.durable, subjects, store, args.start, args.ack_wait)
    sub = await js.pull_subscribe_bind(durable=args.durable, stream=STREAM)
    print(f"subscribed: durable {args.durable} on {STREAM} {' '.join(subjects)}; {where}",
          flush=True)

    handled = 0
    try:
        while not stop.is_set() and (args.max is None or handled < args.max):
            try:
                msgs = await sub.fetch(args.batch, timeout=1.0)
            except TimeoutError:  # nothing new (nats-py raises its own and asyncio's)
                continue
            for i, msg in enumerate(msgs):
                if stop.is_set() or (args.max is not None and handled >= args.max):
                    for rest in msgs[i:]:
                        await rest.nak()  # handed back at once, in order, to the next run
                    break
                seq = msg.metadata.sequence.stream
                try:
                    event = decode(msg, seq)
                except Exception as exc:  # can never succeed: say so and move on
                    print(f"undecodable event at stream seq {seq}: {exc!r}", file=sys.stderr,
                          flush=True)
                    await msg.term()
                    continue
                try:
                    line = store.apply(event)
                except Exception as exc:
                    print(f"failed at stream seq {seq} ({exc!r}); retrying", file=sys.stderr,
                          flush=True)
                    for rest in msgs[i:]:  # the failed event first: order is kept
                        await rest.nak(delay=1.0)
                    await asyncio.sleep(1.0)
                    break
                if line is None:
                    print(f"skipped (already handled) event {event.event_id} seq {seq}",
                          flush=True)
                else:
                    handled += 1
                    print(f"handled event {event.event_id} seq {seq}: {line}", flush=True)
                if args.slow:
                    await asyncio.sleep(args.slow)
                await msg.ack()
    finally:
        # The acks are sent when the server answered a ping after them; then close. (nats-py's
        # drain() can wait forever on a pull subscription's expired request.)
        with contextlib.suppress(Exception):
            await nc.flush(timeout=5)
        await nc.close()
    print(f"stopped after {handled} new events", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nats-url", default=default_nats_url())
    parser.add_argument("--durable", default="example_subscriber",
                        help="this service's consumer name (its position on the server)")
    parser.add_argument("--state", default=None,
                        help="the local SQLite file: handled event ids and the effects "
                             "(default: <HABITUS_DATA_DIR or ./var>/<durable>.sqlite)")
    parser.add_argument("--tenant", action="append", default=None,
                        help="only this tenant's events (repeatable; default: every tenant); "
                             "read when the durable is created")
    parser.add_argument("--max", type=int, default=None, metavar="N",
                        help="stop after N newly handled events")
    parser.add_argument("--from", dest="start", choices=("all", "new"), default="all",
                        help="where a durable created now starts (default: the first event)")
    parser.add_argument("--ack-wait", type=float, default=30.0,
                        help="seconds before an unacked delivery is delivered again")
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--decode", choices=("auto", "habitus", "json"), default="auto")
    parser.add_argument("--slow", type=float, default=0.0, metavar="SECONDS",
                        help="sleep between committing an event and acking it")
    args = parser.parse_args(argv)
    if args.state is None:  # one state per durable: a new durable starts a new state
        args.state = str(Path(os.environ.get("HABITUS_DATA_DIR", "var")) / f"{args.durable}.sqlite")
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
