"""The event catalog: envelope, ingest contract, domain events, evidence references."""

from habitus.events.catalog import (
    CATALOG,
    Catalog,
    EventSpec,
    EventValidationError,
    FieldError,
    install_keyring,
)
from habitus.events.envelope import ENVELOPE_FIELDS, Event, Payload

__all__ = (
    "CATALOG",
    "ENVELOPE_FIELDS",
    "Catalog",
    "Event",
    "EventSpec",
    "EventValidationError",
    "FieldError",
    "Payload",
    "install_keyring",
)
