"""What a publish failure means for the event: the gateway's answer to the client rests on it."""

from __future__ import annotations

import pytest
from nats.errors import (
    ConnectionClosedError,
    MaxPayloadError,
    NoRespondersError,
    OutboundBufferLimitError,
)
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.errors import APIError, NoStreamResponseError, ServiceUnavailableError

from habitus.bus.publisher import FailureKind, NotConfirmed, failure_kind


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (OutboundBufferLimitError(), "not_stored"),  # disconnected: never written
        (ConnectionClosedError(), "not_stored"),
        (NoRespondersError(), "not_stored"),
        (NoStreamResponseError(), "not_stored"),  # no stream took it
        (ServiceUnavailableError(code=503), "not_stored"),  # JetStream answered: not stored
        (APIError(code=503, description="JetStream system temporarily unavailable"),
         "not_stored"),
        (NatsTimeoutError(), "not_confirmed"),  # sent, no ack: may be stored
        (TimeoutError(), "not_confirmed"),
        (NotConfirmed("no ack"), "not_confirmed"),
        (MaxPayloadError(), "too_large"),  # never fits: permanent
        (APIError(code=400, description="expected stream does not match"), "refused"),
        (RuntimeError("a bug"), "refused"),
    ],
    ids=lambda v: v if isinstance(v, str) else type(v).__name__,
)
def test_failure_kind(exc: BaseException, kind: FailureKind) -> None:
    assert failure_kind(exc) == kind


def test_not_confirmed_is_still_a_timeout_for_callers_that_retry_timeouts() -> None:
    assert isinstance(NotConfirmed("x"), NatsTimeoutError)
    assert isinstance(NotConfirmed("x"), TimeoutError)
