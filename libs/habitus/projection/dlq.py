"""Dead letters: an event a consumer gave up on, kept with why and where it came from.

The original bytes are kept untouched so an operator can fix the cause and re-publish them; the
headers say which consumer, why, and the original subject and stream sequence.
"""

from __future__ import annotations

from dataclasses import dataclass

from nats.js import JetStreamContext

from habitus.bus.streams import DLQ
from habitus.subjects import dlq_subject, parse_subject

REASON = "Habitus-Dlq-Reason"
DETAIL = "Habitus-Dlq-Detail"
CONSUMER = "Habitus-Dlq-Consumer"
ORIGINAL_SUBJECT = "Habitus-Original-Subject"
ORIGINAL_STREAM = "Habitus-Original-Stream"
ORIGINAL_SEQ = "Habitus-Original-Seq"
DELIVERIES = "Habitus-Deliveries"


@dataclass(frozen=True, slots=True)
class DeadLetter:
    consumer: str
    reason: str  # "invalid_event" | "apply_failed"
    detail: str
    stream: str
    seq: int
    subject: str
    deliveries: int
    data: bytes

    @property
    def msg_id(self) -> str:
        return f"dlq:{self.consumer}:{self.stream}:{self.seq}"

    def headers(self) -> dict[str, str]:
        return {
            "Nats-Msg-Id": self.msg_id,
            REASON: self.reason,
            DETAIL: _header_safe(self.detail)[:2000],
            CONSUMER: self.consumer,
            ORIGINAL_SUBJECT: self.subject,
            ORIGINAL_STREAM: self.stream,
            ORIGINAL_SEQ: str(self.seq),
            DELIVERIES: str(self.deliveries),
        }

    def dlq_subject(self) -> str:
        try:
            parsed = parse_subject(self.subject)
            tenant, user = parsed.tenant_id, parsed.user_id
        except ValueError:
            tenant, user = "_invalid", "_invalid"
        return dlq_subject(self.consumer, tenant, user)


def _header_safe(text: str) -> str:
    return " ".join(text.split())


async def send_to_dlq(js: JetStreamContext, letter: DeadLetter, timeout: float = 5.0) -> None:
    await js.publish(
        letter.dlq_subject(), letter.data, timeout=timeout, stream=DLQ, headers=letter.headers()
    )
