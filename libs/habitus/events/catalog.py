"""The event catalog: the one list of event types, their payloads, versions and streams.

Decoding goes through here so that old schema versions are upcast on read (never rejected) and
every validation failure names the field at fault in the same shape, whether it surfaces as a
gateway 4xx or as a DLQ reason header. So does encoding for the bus: with a keyring installed
(`use_keyring`, at a process's start) a user's event leaves with its payload sealed by the
user's key and is opened again here on the way in (habitus.crypto.sealing); an event whose key
was destroyed by erasure raises `Shredded`.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from habitus.crypto.aead import SealError
from habitus.crypto.columns import COLUMNS
from habitus.crypto.keyring import Keyring, Shredded
from habitus.crypto.sealing import (
    SEALED_END,
    SEALED_END_V1,
    EnvelopeOpener,
    open_body,
    open_event_json,
    seal_event_json,
    sealable,
)
from habitus.events import domain, ingest
from habitus.events.envelope import Event, Payload
from habitus.ids import new_event_id
from habitus.subjects import event_subject, ingest_subject

TYPE_HEADER = "Habitus-Type"
VERSION_HEADER = "Habitus-Schema-Version"

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]
PayloadType = type[Payload]
EventModel = type[Event[Any]]
StreamName = Literal["ingest", "events"]


@dataclass(frozen=True, slots=True)
class FieldError:
    field: str
    reason: str

    def as_dict(self) -> dict[str, str]:
        return {"field": self.field, "reason": self.reason}


class EventValidationError(ValueError):
    """An event that can never be processed as sent. Carries every field error."""

    def __init__(self, errors: list[FieldError]):
        self.errors = errors
        super().__init__("; ".join(f"{e.field}: {e.reason}" for e in errors))

    @classmethod
    def single(cls, field_name: str, reason: str) -> EventValidationError:
        return cls([FieldError(field_name, reason)])

    @classmethod
    def from_pydantic(cls, exc: ValidationError, prefix: str = "") -> EventValidationError:
        errors = []
        for err in exc.errors(include_url=False):
            loc = ".".join(str(p) for p in err["loc"] if p not in ("function-after",))
            name = f"{prefix}{loc}" if loc else (prefix.rstrip(".") or "body")
            errors.append(FieldError(name, err["msg"]))
        return cls(errors)


@dataclass(frozen=True)
class EventSpec:
    type: str
    payload: PayloadType
    stream: StreamName
    kind: str | None = None
    version: int = 1
    # upcasters[n] turns a version-n payload into version n+1.
    upcasters: Mapping[int, Upcaster] = field(default_factory=dict)
    description: str = ""
    #: published by Habitus itself on the ingest stream (a service's tick), never by agents:
    #: the gateway refuses it like a domain event
    internal: bool = False

    def __post_init__(self) -> None:
        missing = [v for v in range(1, self.version) if v not in self.upcasters]
        if missing:
            raise ValueError(f"{self.type}: no upcaster from version(s) {missing}")
        if self.stream == "ingest" and not self.kind:
            raise ValueError(f"{self.type}: an ingest type needs a kind")

    @property
    def model(self) -> EventModel:
        return _parametrized(self.payload)

    def upcast(self, payload: dict[str, Any], from_version: int) -> dict[str, Any]:
        for v in range(from_version, self.version):
            payload = self.upcasters[v](dict(payload))
        return payload


_MODELS: dict[type[BaseModel], EventModel] = {}


def _parametrized(payload: PayloadType) -> EventModel:
    model = _MODELS.get(payload)
    if model is None:
        model = Event[payload]  # type: ignore[valid-type]
        _MODELS[payload] = model
    return model


class Catalog:
    def __init__(self, specs: Iterable[EventSpec]):
        #: seals users' payloads on `encode`, opens them on decode (None: plain, and a sealed
        #: event cannot be read)
        self.keyring: Keyring | None = None
        self._by_type: dict[str, EventSpec] = {}
        self._by_kind: dict[str, EventSpec] = {}
        self._by_payload: dict[type[Payload], EventSpec] = {}
        for spec in specs:
            if spec.type in self._by_type:
                raise ValueError(f"duplicate event type {spec.type}")
            self._by_type[spec.type] = spec
            self._by_payload[spec.payload] = spec
            if spec.kind:
                self._by_kind[spec.kind] = spec

    def __iter__(self) -> Any:
        return iter(self._by_type.values())

    def __contains__(self, type_name: object) -> bool:
        return type_name in self._by_type

    def use_keyring(self, keyring: Keyring | None) -> None:
        """Install the process's keyring (its bootstrap does, from the settings)."""
        self.keyring = keyring

    def encode(self, event: Event[Any]) -> bytes:
        """The bytes published for `event`: its JSON, the payload sealed when a keyring is
        installed and the event is a user's."""
        keyring = self.keyring
        if keyring is None or not sealable(event.type, event.user_id):
            return event.to_json()
        return seal_event_json(event.to_json(), event.tenant_id, event.user_id, event.event_id,
                               event.type, keyring)

    def spec(self, type_name: str) -> EventSpec:
        try:
            return self._by_type[type_name]
        except KeyError:
            raise EventValidationError.single(
                "type", f"unknown event type {type_name!r}"
            ) from None

    def ingest_types(self) -> list[str]:
        """The types agents may send (the ingest stream's, without Habitus's own ticks)."""
        return [s.type for s in self if s.stream == "ingest" and not s.internal]

    def spec_for(self, payload: Payload) -> EventSpec:
        try:
            return self._by_payload[type(payload)]
        except KeyError:
            raise TypeError(f"{type(payload).__name__} is not in the catalog") from None

    def new(
        self,
        payload: Payload,
        *,
        tenant_id: str,
        user_id: str,
        producer: str,
        occurred_at: float | None = None,
        event_id: str | None = None,
        causation_id: str | None = None,
        correlation_id: str | None = None,
    ) -> Event[Any]:
        spec = self.spec_for(payload)
        try:
            return spec.model(
                event_id=event_id or new_event_id(),
                type=spec.type,
                schema_version=spec.version,
                tenant_id=tenant_id,
                user_id=user_id,
                occurred_at=time.time() if occurred_at is None else occurred_at,
                producer=producer,
                causation_id=causation_id,
                correlation_id=correlation_id,
                payload=payload,
            )
        except ValidationError as exc:
            raise EventValidationError.from_pydantic(exc) from exc

    def decode(self, data: bytes | str | Mapping[str, Any], *, strict: bool = False
               ) -> Event[Any]:
        """Parse and validate an event, upcasting an old payload version first.

        `strict`: coerce nothing (the edge: `"1764460800"` is no number, `1` no boolean)."""
        if isinstance(data, bytes) and data.endswith(SEALED_END):
            # sealed with its envelope as written: it opens from these bytes
            data = self._opened_json(data) or data
        if isinstance(data, bytes | str):
            try:
                raw = json.loads(data)
            except ValueError as exc:
                raise EventValidationError.single("body", f"not JSON: {exc}") from exc
        else:
            raw = data
        if not isinstance(raw, Mapping):
            raise EventValidationError.single("body", "an event must be a JSON object")
        if "sealed" in raw:
            raw = self._opened(raw)
        type_name = raw.get("type")
        if not isinstance(type_name, str):
            raise EventValidationError.single("type", "field required (a string)")
        spec = self.spec(type_name)
        body = dict(raw)
        version = body.get("schema_version", 1)
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise EventValidationError.single("schema_version", "must be a positive integer")
        if version > spec.version:
            raise EventValidationError.single(
                "schema_version",
                f"{type_name} v{version} is newer than this reader (v{spec.version})",
            )
        payload = body.get("payload")
        if not isinstance(payload, Mapping):
            raise EventValidationError.single("payload", "field required (an object)")
        if version < spec.version:
            body["payload"] = spec.upcast(dict(payload), version)
            body["schema_version"] = spec.version
        try:
            return spec.model.model_validate(body, strict=strict)
        except ValidationError as exc:
            raise EventValidationError.from_pydantic(exc) from exc

    def _opened(self, raw: Mapping[str, Any]) -> Mapping[str, Any]:
        """A sealed body opened (`Shredded` passes through: the user was erased)."""
        if self.keyring is None:
            raise EventValidationError.single(
                "sealed", "the payload is sealed and this process has no keyring "
                          "(HABITUS_ENCRYPT_EVENTS, HABITUS_KEYSTORE_DIR)")
        try:
            return open_body(raw, self.keyring)
        except Shredded:
            raise
        except (SealError, ValueError, TypeError) as exc:
            raise EventValidationError.single("payload", f"sealed, and does not open: {exc}"
                                              ) from None

    def _opened_json(self, data: bytes, opener: EnvelopeOpener | None = None
                     ) -> bytes | None:
        """The plain JSON of a sealed body read from its bytes (`open_event_json`); None when
        this process has no keyring or the body is not in a form read from its bytes (the
        general path then decides). `Shredded` passes through: the user was erased."""
        if self.keyring is None:
            return None
        try:
            if opener is not None and data.endswith(SEALED_END):
                # a batch's (one clock read and memo for all its bodies), its compiled path
                # already asked by `decode_message`
                return opener.decide(data)
            return open_event_json(data, self.keyring)
        except Shredded:
            raise
        except (SealError, ValueError) as exc:
            raise _unopened(exc) from None

    def opener(self) -> EnvelopeOpener | None:
        """What opens sealed bodies for one batch of deliveries (`decode_message`), None when
        this process has no keyring: a batch's decoding makes one and hands it to each."""
        return None if self.keyring is None else EnvelopeOpener(self.keyring)

    def decode_message(self, data: bytes, headers: Mapping[str, str] | None,
                       opener: EnvelopeOpener | None = None) -> Event[Any]:
        """Decode a bus message. When the publisher's type and version headers name the current
        version, validate straight from JSON (no intermediate dict); otherwise take the general
        path with upcasting. A sealed body (it ends as `seal_event_json` ends it) is opened
        first, to the same plain JSON: by `opener` (a batch's; its compiled path called
        directly, the hot path of every consumer), or on its own."""
        if data.endswith(SEALED_END) or data.endswith(SEALED_END_V1):
            fast = None if opener is None else opener.fast
            try:
                plain = None if fast is None else fast(data)
            except SealError as exc:
                raise _unopened(exc) from None
            if plain is None:
                plain = self._opened_json(data, opener)
                if plain is None:
                    return self.decode(data)  # the general path opens it, or says why not
            data = plain
        if headers:
            type_name = headers.get(TYPE_HEADER)
            spec = self._by_type.get(type_name) if type_name else None
            if spec is not None and headers.get(VERSION_HEADER) == str(spec.version):
                try:
                    event = spec.model.model_validate_json(data)
                except ValidationError:
                    pass  # the general path reports the error in its own terms
                else:
                    if event.type == spec.type and event.schema_version == spec.version:
                        return event
        return self.decode(data)

    def subject(self, event: Event[Any]) -> str:
        spec = self.spec(event.type)
        if spec.stream == "ingest":
            assert spec.kind is not None
            return ingest_subject(spec.kind, event.tenant_id, event.user_id)
        return event_subject(event.type, event.tenant_id, event.user_id)


def _unopened(exc: ValueError) -> EventValidationError:
    """A sealed body that does not open, as a bad event (it goes to the dead letters)."""
    return EventValidationError.single("payload", f"sealed, and does not open: {exc}")


def _ingest(payload: type[Payload], kind: str, description: str) -> EventSpec:
    return EventSpec(payload.__name__, payload, "ingest", kind=kind, description=description)


def _domain(payload: type[Payload], description: str) -> EventSpec:
    return EventSpec(payload.__name__, payload, "events", description=description)


CATALOG = Catalog(
    [
        _ingest(ingest.TurnRecorded, "turn", "A chat turn, with its tool calls."),
        _ingest(ingest.EmailObserved, "email", "An email the user sent or received."),
        _ingest(ingest.DocumentIngested, "document", "A chunk of a document the user owns."),
        _ingest(ingest.ProviderProfileSynced, "provider_profile", "A connected account."),
        _ingest(ingest.TraceCompleted, "trace", "An agent run, step by step."),
        _ingest(ingest.FeedbackGiven, "feedback", "A score for a trace or a turn."),
        EventSpec("ExtractionWindowDue", ingest.ExtractionWindowDue, "ingest",
                  kind="extraction_due", internal=True,
                  description="The extractor's tick: a source's open window waited long enough."),
        _domain(domain.CandidateEmitted, "A producer saw evidence for a facet value."),
        _domain(domain.FacetPinned, "The user pinned a facet."),
        _domain(domain.FacetUnpinned, "The user returned a facet to automatic."),
        _domain(domain.FacetForgotten, "The user asked to forget a facet."),
        _domain(domain.FacetUpdated, "The user set a facet's value (and pinned it)."),
        _domain(domain.CacheResetRequested, "The user cleared the learned facets."),
        _domain(domain.RebuildRequested, "Recompute a user's cache as of a time."),
        _domain(domain.CacheRebuilt, "A user's facet cache changed."),
        _domain(domain.ProfileRendered, "A new PROFILE.md version was written."),
        _domain(domain.ProfileNotesSaved, "The user edited their PROFILE.md notes."),
        EventSpec("ToolRuleUpserted", domain.ToolRuleUpserted, "events", version=2,
                  upcasters={1: domain.tool_rule_v1_to_v2},
                  description="A tool-scoped rule was created or changed."),
        _domain(domain.ToolRuleDeleted, "A tool-scoped rule was removed."),
        _domain(domain.RouteDecided, "The router chose a model for a query."),
        _domain(domain.RoutingPolicyUpdated, "The learned routing policy changed."),
        _domain(domain.SourceSummarised, "The extractor summarised a window of a source."),
        _domain(domain.ReextractionRequested,
                "An operator asked for windows to be extracted again with the current prompt."),
        _domain(domain.ConnectedAccountSynced, "A connected account, for the profile."),
        _domain(domain.UserErased, "All of a user's data is to be erased."),
        _domain(domain.HabitSuggested, "A habit was proposed from evidence, or declared."),
        _domain(domain.HabitEvidenceAdded, "Analyze saw a known habit again."),
        _domain(domain.HabitApproved,
                "The user approved a habit: active, or approved pending what it waits for."),
        _domain(domain.HabitActivated, "An approved habit's wait ended; it is active."),
        _domain(domain.HabitRejected, "The user rejected a suggested habit."),
        _domain(domain.HabitEdited,
                "The user edited a habit; a changed wording needs a new approval."),
        _domain(domain.HabitRetired, "A habit was archived."),
        _domain(domain.HabitDisabled, "The user switched a habit off."),
        _domain(domain.HabitEnabled, "The user switched a habit back on."),
        _domain(domain.HabitDormant, "A strong contradiction put an active habit to sleep."),
        _domain(domain.HabitSuppressedByLaw, "The tenant's law forbids an active habit."),
        _domain(domain.HabitMerged, "A duplicate habit was merged into another."),
        _domain(domain.HabitSuperseded, "A habit was replaced by another."),
        _domain(domain.HabitDuplicateFound, "Two habits may be the same; a person decides."),
        _domain(domain.HabitDuplicateResolved, "A person decided about a possible duplicate."),
        _domain(domain.HabitLawSet, "A tenant's habit law changed."),
        _domain(domain.HabitSettingsChanged, "A tenant's habit settings changed."),
        _domain(domain.AdviceIssued, "The advisor's recommendations for a tenant changed."),
        _domain(domain.OptimizationRunStarted, "A tenant started searching its configuration."),
        _domain(domain.TrialEvaluated, "One configuration of a run was tried and measured."),
        _domain(domain.OptimizationRunCompleted, "A run tried all it would."),
        _domain(domain.OptimizationRunStopped, "A run was stopped before its end."),
        _domain(domain.OptimizationRunFailed, "A run could not go on."),
        _domain(domain.ConfigurationApplied, "The tenant's configuration changed (or reverted)."),
    ]
)


def install_keyring_once(make: Callable[[], Keyring | None]) -> None:
    """For a command that reads users' events in a process of its own: install the keyring
    `make` builds, unless one is installed already (the command run inside a process that
    has one, as tests run the CLI, must not swap the keyring its services use)."""
    if CATALOG.keyring is None:
        install_keyring(make())


def install_keyring(keyring: Keyring | None) -> None:
    """Install the process's keyring (its bootstrap does, from the settings) where it is used:
    the catalog seals and opens users' payloads with it, `COLUMNS` the projections' columns."""
    CATALOG.use_keyring(keyring)
    COLUMNS.use_keyring(keyring)


async def warm_keys(catalog: Catalog, owners: Iterable[tuple[str, str]], *,
                    create: bool) -> None:
    """Read the data keys of `owners` (tenant, user) into the catalog's keyring off the event
    loop (a thread), before a batch of their events is sealed (`create`: a new user's key is
    made, with an fsync) or opened; those already in memory cost a lookup."""
    keyring = catalog.keyring
    if keyring is None:
        return
    cold = keyring.cold((o for o in owners if not o[1].startswith("_")), creating=create)
    if cold:
        await asyncio.to_thread(keyring.warm, cold, create)
