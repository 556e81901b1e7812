"""The two evaluators a run (or `optimize.evaluate`) measures a configuration with.

- `Counterfactual`: the doubly robust estimate over the recorded decisions
  (`counterfactual.estimate`), from an `EvaluationLog` read once.
- `Replay`: queries sent to the tenant's OpenAI-compatible endpoint under the configuration:
  the model routing would choose for each (the same `decide` the router runs, over the models
  the replay may use), the configuration's generation settings and system prompt. Each answer is
  scored by its reference (an answer containing the reference, case and spacing aside, is
  right), else by the judge model when one is named, else not at all; latency is measured,
  tokens come from the endpoint's usage, cost from the model's catalogue price. Each metric is
  the mean over the answered queries with its normal 95 % interval.

A replayed call that fails (after the client's own retries) leaves that query out and counts
against the support; if every call fails the estimate is refused with the reason. A spent
daily budget is not a failure of the configuration: it propagates, and the run stops.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from habitus.contract.configuration import section
from habitus.llm import BudgetExhausted, LlmClient, LlmError, Sampling
from habitus.routing.configured import decide, routing_for
from habitus.routing.context import build_context
from habitus.routing.policies import RouterState
from habitus.routing.prices import price_of
from habitus.routing.reward import reward
from habitus.routing.sizes import resolve
from services.optimizer.counterfactual import Z95, Estimate, EvaluationLog, estimate

DEFAULT_SYSTEM: Final = "You are a helpful assistant. Answer the user's request."
JUDGE_SYSTEM: Final = (
    "You grade answers. Given a request and an answer, reply with a single number between 0 "
    "and 1: how well the answer serves the request (1: fully, 0: not at all). Nothing else.")
#: replayed calls in flight at once per trial
CONCURRENCY: Final = 4
_NUMBER = re.compile(r"(?<![\d.])(0(?:\.\d+)?|1(?:\.0+)?)(?![\d.])")


@dataclass(frozen=True, slots=True)
class Counterfactual:
    log: EvaluationLog
    baseline: Mapping[str, Any]
    default_policy: str
    min_samples: int
    metrics: Sequence[str]
    min_support: int

    async def evaluate(self, params: Mapping[str, Any]) -> Estimate:
        routing = routing_for({**self.baseline, **params}, None, self.default_policy,
                              self.min_samples)
        return estimate(self.log, routing, self.metrics, min_support=self.min_support)


@dataclass(frozen=True, slots=True)
class Query:
    text: str
    reference: str | None = None


def normalised(text: str) -> str:
    return " ".join(text.lower().split())


def reference_score(answer: str, reference: str) -> float:
    """1 when the answer contains the reference (case and spacing aside), else 0."""
    return 1.0 if normalised(reference) in normalised(answer) else 0.0


def judge_score(text: str) -> float | None:
    """The first number in [0, 1] of a judge's answer; None when it gave none."""
    match = _NUMBER.search(text)
    return None if match is None else float(match.group(1))


def summarise(values: Sequence[float], z: float = Z95) -> tuple[float, list[float]]:
    """The mean and its normal interval."""
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, [mean, mean]
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = z * sd / math.sqrt(n)
    return mean, [mean - half, mean + half]


@dataclass(frozen=True, slots=True)
class _Answer:
    accuracy: float | None
    latency_seconds: float
    tokens: float
    cost_usd: float | None
    reward: float


class Replay:
    def __init__(self, client: LlmClient, tenant_id: str, queries: Sequence[Query],
                 models: Sequence[str], baseline: Mapping[str, Any], default_policy: str,
                 min_samples: int, metrics: Sequence[str], judge_model: str | None,
                 state: RouterState | None = None):
        self._client = client
        self._tenant = tenant_id
        self._queries = list(queries)
        self._models, self._sizes = resolve(list(models))
        self._baseline = dict(baseline)
        self._default_policy = default_policy
        self._min_samples = min_samples
        self._metrics = list(metrics)
        self._judge = judge_model
        self._state = state or RouterState()

    async def evaluate(self, params: Mapping[str, Any]) -> Estimate:
        if not self._queries:
            return Estimate(dict.fromkeys(self._metrics), {}, 0,
                            "nothing to replay: no recorded queries in the window and no "
                            "benchmark")
        config = {**self._baseline, **params}
        routing = routing_for(config, None, self._default_policy, self._min_samples)
        generation = section(config, "generation")
        gate = asyncio.Semaphore(CONCURRENCY)
        errors: list[str] = []

        async def one(query: Query) -> _Answer | None:
            async with gate:
                try:
                    return await self._answer(query, routing, generation)
                except BudgetExhausted:
                    raise
                except LlmError as exc:
                    errors.append(f"{exc.reason}: {exc}")
                    return None

        answers = [a for a in await asyncio.gather(*(one(q) for q in self._queries))
                   if a is not None]
        if not answers:
            return Estimate(dict.fromkeys(self._metrics), {}, 0,
                            f"every replayed call failed ({errors[0] if errors else '?'})")
        values: dict[str, float | None] = {}
        intervals: dict[str, list[float]] = {}
        for metric in self._metrics:
            observed = [v for a in answers if (v := getattr(a, metric, None)) is not None]
            if not observed:
                values[metric] = None
                continue
            values[metric], intervals[metric] = summarise(observed)
        return Estimate(values, intervals, len(answers))

    async def _answer(self, query: Query, routing: Any, generation: Mapping[str, Any]
                      ) -> _Answer:
        ctx = build_context(query.text)
        decision = hashlib.sha256(query.text.encode()).hexdigest()[:32]
        model = decide(routing, ctx, self._models, self._sizes, None, None, self._state,
                       decision).model
        started = time.monotonic()
        answer = await self._client.complete_text(
            tenant_id=self._tenant, system=str(generation.get("system_prompt") or
                                               DEFAULT_SYSTEM),
            user=query.text, sampling=Sampling(
                model=model, temperature=generation.get("temperature"),
                top_p=generation.get("top_p"), max_tokens=generation.get("max_tokens")))
        latency = time.monotonic() - started
        if query.reference is not None:
            accuracy: float | None = reference_score(answer.content, query.reference)
        elif self._judge is not None:
            accuracy = await self._judged(query.text, answer.content)
        else:
            accuracy = None
        price = price_of(model)
        cost = price.cost(answer.tokens_in, answer.tokens_out) if price is not None else None
        return _Answer(accuracy, latency, float(answer.tokens_in + answer.tokens_out), cost,
                       reward(latency_seconds=latency, cost_usd=cost,
                              prompt_tokens=answer.tokens_in,
                              completion_tokens=answer.tokens_out, feedback=accuracy))

    async def _judged(self, request: str, answer: str) -> float | None:
        verdict = await self._client.complete_text(
            tenant_id=self._tenant, system=JUDGE_SYSTEM,
            user=f"Request:\n{request}\n\nAnswer:\n{answer}",
            sampling=Sampling(model=self._judge, temperature=0.0, max_tokens=16))
        return judge_score(verdict.content)
