"""Checking events against docs/asyncapi.json, and running the AsyncAPI CLI on it.

`make install` puts the CLI (npm `@asyncapi/cli`, pinned in tools/asyncapi) in .venv/asyncapi.
Without npm it cannot be installed, and the tests that need it skip saying so; with npm its
absence is a failed setup, and they fail.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import jsonschema
import nats
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from habitus.crypto.sealing import is_sealed, open_event
from habitus.events import CATALOG

ROOT = Path(__file__).parents[2]
DOCUMENT = ROOT / "docs" / "asyncapi.json"
CLI = ROOT / ".venv" / "asyncapi" / "node_modules" / ".bin" / "asyncapi"
BASE = "urn:habitus:asyncapi"


def cli_missing() -> str | None:
    """Why the CLI cannot run here (only when npm itself is absent), or None."""
    if CLI.exists():
        return None
    if shutil.which("npm") is None:
        return "npm is not installed, so the AsyncAPI CLI could not be (make install)"
    raise AssertionError(f"npm is here but the AsyncAPI CLI is not at {CLI}: run make install")


def validate_with_cli(document: Path, home: Path) -> subprocess.CompletedProcess[str]:
    """`asyncapi validate` with its usage analytics off (no network calls: it would try)."""
    settings = home / "asyncapi-analytics.json"
    settings.write_text(json.dumps({"analyticsEnabled": "false", "infoMessageShown": "true",
                                    "userID": "habitus-tests"}))
    env = {"PATH": str(CLI.parent) + ":/usr/bin:/bin", "HOME": str(home),
           "ASYNCAPI_METRICS_CONFIG_PATH": str(settings)}
    return subprocess.run([str(CLI), "validate", str(document)], capture_output=True,
                          text=True, env=env, timeout=300)


SCHEMA = "#/components/schemas/{}"


class EventChecker:
    """Validates an event (the message body and its headers) against the document's channel
    for its subject, as a subscriber reading only the document would."""

    def __init__(self, document: dict[str, Any] | None = None):
        self.doc = document if document is not None else json.loads(DOCUMENT.read_text())
        resource = Resource.from_contents(self.doc, default_specification=DRAFT202012)
        self.registry: Registry[Any] = Registry().with_resource(BASE, resource)
        # a consumer sees the stored subject: the address, or what the stream stores it as
        self.channels = [(name, pattern.split(".")) for name, ch in self.doc["channels"].items()
                         for pattern in (ch["address"],
                                         ch["x-habitus-jetstream"]["stored_subject"])]

    def channel_of(self, subject: str) -> str:
        parts = subject.split(".")
        found = [name for name, address in self.channels if len(address) == len(parts) and all(
            a == p or a.startswith("{") for a, p in zip(address, parts, strict=True))]
        assert len(found) == 1, (subject, found)
        return found[0]

    def check(self, subject: str, body: bytes, headers: dict[str, str] | None) -> dict[str, Any]:
        """The decoded event; raises if it does not match its channel's message."""
        channel = self.channel_of(subject)
        event = json.loads(body)
        message = self.doc["components"]["messages"][channel]
        ref = message["payload"]["$ref"]
        if "oneOf" in self.doc["components"]["schemas"][ref.rsplit("/", 1)[1]]:
            # the message's two forms exclude each other (a string payload or an object):
            # validating against the one the body has names the field at fault
            ref = SCHEMA.format(f"{channel}SealedEvent" if is_sealed(event)
                                else f"{channel}Event")
        self._validate(event, ref)
        assert event["type"] == channel, (subject, event["type"])
        if is_sealed(event):
            # what a subscriber with the key store reads: the plain form of the same message
            assert CATALOG.keyring is not None
            event = open_event(body, CATALOG.keyring)
            self._validate(event, SCHEMA.format(f"{channel}Event"))
        headers_schema = jsonschema.Draft202012Validator(message["headers"])
        problems = [e.message for e in headers_schema.iter_errors(dict(headers or {}))]
        if problems:
            raise AssertionError(f"headers of {subject}: " + "; ".join(problems))
        return dict(event)

    def _validate(self, instance: Any, ref: str) -> None:
        validator = jsonschema.Draft202012Validator(
            {"$ref": BASE + ref}, registry=self.registry,
            format_checker=jsonschema.FormatChecker())
        errors = sorted(validator.iter_errors(instance), key=lambda e: list(e.path))
        if errors:
            raise AssertionError("; ".join(
                f"{'.'.join(map(str, e.path)) or '(event)'}: {e.message}" for e in errors[:5]))


async def tenant_messages(nats_url: str, tenant: str) -> list[Any]:
    """Every message of `tenant` on the ingest stream and the event log, in stream order."""
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        found: list[Any] = []
        for subject in (f"habitus.v1.ingest.*.{tenant}.>", f"habitus.v1.event.*.{tenant}.>"):
            sub = await js.subscribe(subject, ordered_consumer=True)
            try:
                while True:
                    try:
                        found.append(await sub.next_msg(timeout=1.0))
                    except nats.errors.TimeoutError:
                        break
            finally:
                await sub.unsubscribe()
        return found
    finally:
        await nc.close()


def active_keys(payload: dict[str, Any]) -> set[tuple[str, str]]:
    return {(f["class"], f["key"]) for f in payload["active"]}


def cache_count_problems(events: Iterable[dict[str, Any]]) -> list[str]:
    """Where a user's `CacheRebuilt` counts disagree with the Active sets it reports, walking
    each user's events in order: `added` must be the facets Active now and not before,
    `evicted` the reverse, `kept` those in both, `total_size` the number Active."""
    by_user: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        if e["type"] == "CacheRebuilt":
            by_user[(e["tenant_id"], e["user_id"])].append(e["payload"])
    problems = []
    for (tenant, user), payloads in by_user.items():
        before: set[tuple[str, str]] = set()
        for n, p in enumerate(payloads):
            now = active_keys(p)
            want = (len(now - before), len(before - now), len(now & before), len(now))
            got = (p["added"], p["evicted"], p["kept"], p["total_size"])
            if got != want or p["total_size"] != len(p["active"]):
                problems.append(f"{tenant}/{user} rebuild {n}: added, evicted, kept, total "
                                f"{got}, the Active sets say {want}")
            before = now
    return problems
