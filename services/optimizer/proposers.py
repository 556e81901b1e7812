"""The proposers: seeded random, seeded grid, and one guided by a model.

The random and grid proposers need no model and propose the same configurations for the same
seed; their merge is `space.merge` (the values the frontier's best share). The LLM proposer asks
the tenant's configured model through `habitus.llm` (retried and charged to the tenant's daily
budget like the extractor's calls) with the space, objectives, history and frontier, reads its
answer leniently (`proposal_text.parse_answer`), keeps only what the space allows, and puts the
fixed values over it. An answer that cannot be read is a parse failure, recorded on the trial,
which then runs with the fixed values alone.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from habitus.contract.optimize import RunParams
from habitus.llm import LlmClient
from services.optimizer import proposal_text, space
from services.optimizer.engine import Proposal, TrialRecord
from services.optimizer.frontier import Progress


class RandomProposer:
    def __init__(self, definition: RunParams):
        self._d = definition

    async def propose(self, index: int, history: Sequence[TrialRecord],
                      standing: Progress) -> Proposal | None:
        tried = {space.key_of(t.params) for t in history}
        params = space.random_params(self._d.space, self._d.seed, index, tried)
        return None if params is None else Proposal(params, "random")

    async def merge(self, index: int, history: Sequence[TrialRecord], standing: Progress,
                    best: Sequence[TrialRecord]) -> Proposal | None:
        merged = space.merge([t.params for t in best], self._d.space)
        return None if merged is None else Proposal(
            merged, "merge", f"merged from {', '.join(t.trial_id for t in best)}")


class GridProposer(RandomProposer):
    """The grid in its seeded order; a point already tried (a merge found it) is skipped."""

    async def propose(self, index: int, history: Sequence[TrialRecord],
                      standing: Progress) -> Proposal | None:
        tried = {space.key_of(t.params) for t in history}
        walk: Iterator[space.Params] = space.grid_walk(self._d.space, self._d.seed)
        for params in walk:
            if space.key_of(params) not in tried:
                return Proposal(params, "grid")
        return None


class LlmProposer:
    def __init__(self, definition: RunParams, client: LlmClient, tenant_id: str):
        self._d = definition
        self._client = client
        self._tenant = tenant_id

    async def propose(self, index: int, history: Sequence[TrialRecord],
                      standing: Progress) -> Proposal | None:
        return await self._ask(history, standing, ())

    async def merge(self, index: int, history: Sequence[TrialRecord], standing: Progress,
                    best: Sequence[TrialRecord]) -> Proposal | None:
        proposal = await self._ask(history, standing, best)
        return Proposal(proposal.params, "merge", proposal.reasoning, proposal.parse_failure)

    async def _ask(self, history: Sequence[TrialRecord], standing: Progress,
                   best: Sequence[TrialRecord]) -> Proposal:
        shown = [proposal_text.Tried(t.trial_id, t.params, t.metrics) for t in history]
        prompt = proposal_text.build_prompt(
            self._d.space, self._d.objectives, shown, [s.trial_id for s in standing.frontier],
            [proposal_text.Tried(t.trial_id, t.params, t.metrics) for t in best])
        answer = await self._client.complete_text(tenant_id=self._tenant,
                                                  system=proposal_text.SYSTEM, user=prompt)
        parsed = proposal_text.parse_answer(answer.content)
        if parsed is None:
            snippet = " ".join(answer.content.split())[:300]
            return Proposal(space.with_fixed({}, self._d.space), "llm",
                            f"the model's answer could not be read: {snippet!r}",
                            parse_failure=True)
        proposed, reasoning = parsed
        params, notes = space.sanitize(proposed, self._d.space)
        why = " ".join(filter(None, [reasoning, *(f"(dropped {n})" for n in notes)]))
        if space.excluded(params, self._d.space.constraints.exclude):
            why = f"{why} (the proposal breaks a constraint: fixed values only)".strip()
            params = space.with_fixed({}, self._d.space)
        return Proposal(params, "llm", why[:4000] or None)


def proposer_for(definition: RunParams, client: LlmClient | None, tenant_id: str
                 ) -> RandomProposer | LlmProposer:
    if definition.proposer == "llm":
        if client is None:
            raise ValueError("the llm proposer needs an LLM endpoint")
        return LlmProposer(definition, client, tenant_id)
    if definition.proposer == "grid":
        return GridProposer(definition)
    return RandomProposer(definition)
