"""`habitus events tail`: HABITUS_EVENTS the way a subscriber sees it, one line per event.

An ephemeral ordered consumer from now (or from the start), filtered by type, tenant and user;
`--json` prints each message whole (its sequence, subject and event). It needs
HABITUS_NATS_URL, or a `habitus up` running on the same data directory (`habitus.cli.connect`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from typing import Annotated, Any

import typer

from habitus.cli.connect import bus_settings, nats, run
from habitus.cli.gateway import fail
from habitus.cli.output import iso, short

events_app = typer.Typer(help="The event log, live (HABITUS_EVENTS).", no_args_is_help=True)


def event_filter(event_type: str | None, tenant: str | None, user: str | None) -> str:
    """The HABITUS_EVENTS subject filter for a type, a tenant and a user (each optional)."""
    from habitus.subjects import EVENT_ROOT, user_filter

    for value, what in ((event_type, "--type"), (tenant, "--tenant"), (user, "--user")):
        if value is not None and (not value or any(c in value for c in ". *>\t\r\n")):
            raise ValueError(f"{what} {value!r} cannot be a subject token")
    return user_filter(EVENT_ROOT, event_type or "*", tenant or "*", user or "*")


def opened(data: bytes, doc: dict[str, Any]) -> dict[str, Any]:
    """A sealed event (`doc`, parsed from `data`) opened with this process's keyring (an
    operator on the deployment's machine reads the key store); the payload of an erased
    user's event says so."""
    from habitus.crypto.keyring import Shredded
    from habitus.crypto.sealing import is_sealed, open_event
    from habitus.events import CATALOG

    if not is_sealed(doc) or CATALOG.keyring is None:
        return doc
    try:
        return open_event(data, CATALOG.keyring)
    except Shredded:
        return {**doc, "payload": "(erased: the user's key is gone)"}
    except ValueError:
        return doc


def event_json(data: bytes, subject: str, seq: int | None) -> str:
    """One message of the log as one line of JSON: `{"seq", "subject", "event"}`, the event
    whole (`event` is null and `data` holds the text for a message that is not an event)."""
    try:
        doc = json.loads(data)
    except ValueError:
        doc = None
    line: dict[str, Any] = {"seq": seq, "subject": subject}
    if isinstance(doc, dict):
        line["event"] = opened(data, doc)
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
    doc = opened(data, doc)
    occurred = doc.get("occurred_at")
    at = iso(float(occurred)) if isinstance(occurred, int | float) else "-"
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
    from habitus.crypto.setup import keyring_from
    from habitus.events.catalog import install_keyring_once

    install_keyring_once(lambda: keyring_from(settings))

    async def go() -> int:
        from nats.errors import TimeoutError as NatsTimeout
        from nats.js.api import DeliverPolicy

        from habitus.bus.streams import EVENTS

        seen = 0
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        async with nats(settings, "habitus-events-tail") as nc:
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
        run(go)
