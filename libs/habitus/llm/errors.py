"""The one exception an LLM call raises, so callers handle every failure in one place.

`reason` is a stable, low-cardinality word (it labels metrics and decides what the caller does:
retry the window later, quarantine the output, or stop asking for the day).
"""

from __future__ import annotations

from typing import Literal

Reason = Literal["timeout", "rate_limited", "server_error", "bad_request", "connection",
                 "bad_json", "budget", "disabled"]


class LlmError(Exception):
    """An LLM call that produced no usable JSON.

    `retry_after` is the server's (429/503) or the budget's word on when asking again makes
    sense; `content` and the token counts survive a `bad_json` failure because the caller keeps
    the raw output for review and the tokens were spent all the same."""

    def __init__(self, reason: Reason, message: str = "", *, retry_after: float | None = None,
                 content: str | None = None, tokens_in: int = 0, tokens_out: int = 0) -> None:
        super().__init__(f"{reason}: {message}" if message else reason)
        self.reason: Reason = reason
        self.retry_after = retry_after
        self.content = content
        self.tokens_in = tokens_in
        self.tokens_out = tokens_out


class BudgetExhausted(LlmError):
    """The tenant spent today's calls or tokens; raised before any request is made.

    `retry_after` is the time to the next UTC midnight, when the budget resets."""

    def __init__(self, budget: Literal["calls", "tokens"], *, retry_after: float) -> None:
        super().__init__("budget", f"daily {budget} budget exhausted", retry_after=retry_after)
        self.budget: Literal["calls", "tokens"] = budget
