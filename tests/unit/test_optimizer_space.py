"""Search spaces, configurations and proposals: validation with the path and the reason, seeded
random and grid draws, constraints, the LLM answer's lenient reading, undo's restore."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from habitus.contract.configuration import ConfigurationError, validate_configuration
from habitus.contract.optimize import RunParams, SearchSpace
from habitus.llm import TextCompletion
from services.optimizer import space
from services.optimizer.engine import TrialRecord
from services.optimizer.frontier import Progress
from services.optimizer.proposal_text import build_prompt, parse_answer
from services.optimizer.proposers import GridProposer, LlmProposer, RandomProposer
from services.optimizer.rpc import undone

SPACE: dict[str, Any] = {
    "search": [
        {"name": "routing.policy", "values": ["heuristic", "learned", "bandit"]},
        {"name": "routing.model_for.code", "values": ["gpt-4o", "deepseek-coder-v2:16b"]},
        {"name": "generation.temperature", "type": "continuous", "low": 0, "high": 1},
        {"name": "generation.max_tokens", "type": "integer", "low": 256, "high": 4096},
        {"name": "routing.models", "type": "subset",
         "values": ["gpt-4o", "gpt-4o-mini", "llama3.2:3b"]},
    ],
    "fixed": {"prompt.examples": 2},
    "constraints": {"exclude": [{"when": {"routing.policy": "bandit",
                                          "routing.model_for.code": "gpt-4o"}}]},
}


def _space(**changes: Any) -> SearchSpace:
    return SearchSpace.model_validate({**SPACE, **changes})


def _error(data: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as caught:
        RunParams.model_validate(data)
    return str(caught.value)


# ------------------------------------------------------------------ validation

def test_a_configuration_is_checked_path_by_path() -> None:
    assert validate_configuration({"generation.max_tokens": 512.0,
                                   "routing.models": ["b", "a", "b"]}) == {
        "generation.max_tokens": 512, "routing.models": ["a", "b"]}
    with pytest.raises(ConfigurationError) as caught:
        validate_configuration({"routing.policy": "fastest", "generation.top_p": 2,
                                "routing.model_for.poetry": "x", "colour": "blue"})
    errors = dict(caught.value.errors)
    assert errors["routing.policy"].startswith("must be one of heuristic")
    assert errors["generation.top_p"] == "must be at most 1"
    assert "unknown query class 'poetry'" in errors["routing.model_for.poetry"]
    assert errors["colour"].startswith("unknown setting")


@pytest.mark.parametrize(("dimension", "said"), [
    ({"name": "routing.speed", "values": [1]}, "routing.speed: unknown setting"),
    ({"name": "generation.temperature", "type": "continuous", "low": 0.9, "high": 0.1},
     "generation.temperature: low must be below high"),
    ({"name": "generation.temperature", "type": "continuous", "low": 0, "high": 5},
     "generation.temperature: high 5.0 must be at most 2"),
    ({"name": "generation.temperature", "type": "integer", "low": 0, "high": 1},
     "a number setting cannot be a integer dimension"),
    ({"name": "routing.policy", "values": ["heuristic", "fastest"]},
     "routing.policy: value 'fastest' must be one of"),
    ({"name": "routing.policy"}, "routing.policy: a categorical dimension needs values"),
    ({"name": "routing.models", "type": "subset", "values": []},
     "routing.models: a subset dimension needs values"),
])
def test_a_bad_dimension_is_named_with_the_reason(dimension: dict[str, Any], said: str) -> None:
    assert said in _error({"space": {"search": [dimension]}})


def test_space_level_mistakes_are_named() -> None:
    policy = {"name": "routing.policy", "values": ["heuristic"]}
    assert "appear more than once" in _error({"space": {"search": [policy, policy]}})
    assert "fixed: routing.policy also searched" in _error(
        {"space": {"search": [policy], "fixed": {"routing.policy": "learned"}}})
    assert "fixed: generation.top_p: must be at most 1" in _error(
        {"space": {"search": [policy], "fixed": {"generation.top_p": 3}}})
    assert "constraints.exclude[0]: generation.top_p not in the space" in _error(
        {"space": {"search": [policy], "constraints": {"exclude": [
            {"when": {"generation.top_p": 0.5}}]}}})
    assert "best_by: accuracy needs an accuracy objective" in _error(
        {"space": {"search": [policy]}, "best_by": "accuracy"})
    assert "objectives: reward appear more than once" in _error(
        {"space": {"search": [policy]}, "objectives": [
            {"metric": "reward", "direction": "max"}, {"metric": "reward", "direction": "min"}]})


def test_objectives_take_short_directions() -> None:
    run = RunParams.model_validate({"space": {"search": [
        {"name": "routing.policy", "values": ["heuristic"]}]},
        "objectives": [{"metric": "cost_usd", "direction": "min", "weight": 2}]})
    assert run.objectives[0].direction == "minimize" and run.objectives[0].weight == 2


# ------------------------------------------------------------------ random and grid

@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 2**32), index=st.integers(0, 500))
def test_random_draws_stay_in_the_space_and_repeat_by_seed(seed: int, index: int) -> None:
    s = _space()
    params = space.random_params(s, seed, index)
    assert params is not None and params == space.random_params(s, seed, index)
    assert params["prompt.examples"] == 2
    assert params["routing.policy"] in ("heuristic", "learned", "bandit")
    assert 0 <= params["generation.temperature"] <= 1
    assert 256 <= params["generation.max_tokens"] <= 4096
    assert params["routing.models"] and set(params["routing.models"]) <= {
        "gpt-4o", "gpt-4o-mini", "llama3.2:3b"}
    assert not (params["routing.policy"] == "bandit"
                and params["routing.model_for.code"] == "gpt-4o")
    validate_configuration(params)


def test_random_avoids_what_was_tried_and_gives_up_when_all_was() -> None:
    s = SearchSpace.model_validate({"search": [
        {"name": "routing.policy", "values": ["heuristic", "learned"]}]})
    first = space.random_params(s, 1, 0)
    assert first is not None
    second = space.random_params(s, 1, 1, {space.key_of(first)})
    assert second is not None and second != first
    assert space.random_params(s, 1, 2, {space.key_of(first), space.key_of(second)}) is None


def test_the_grid_visits_every_point_once_in_a_seeded_order() -> None:
    s = SearchSpace.model_validate({"search": [
        {"name": "routing.policy", "values": ["heuristic", "learned", "sft"]},
        {"name": "generation.temperature", "type": "continuous", "low": 0, "high": 1},
        {"name": "routing.min_samples", "type": "integer", "low": 1, "high": 40}]})
    assert space.grid_values(s.search[1]) == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert space.grid_values(s.search[2]) == [1, 11, 20, 30, 40]
    walk = [space.key_of(p) for p in space.grid_walk(s, 3)]
    assert len(walk) == len(set(walk)) == 3 * 5 * 5
    assert walk != [space.key_of(p) for p in space.grid_walk(s, 4)]
    assert sorted(walk) == sorted(space.key_of(p) for p in space.grid_walk(s, 4))


def test_grid_proposals_skip_what_was_tried_then_end() -> None:
    run = RunParams.model_validate({"space": {"search": [
        {"name": "routing.policy", "values": ["heuristic", "learned"]}]}, "proposer": "grid"})
    proposer = GridProposer(run)
    nothing = Progress(None, 0, ())
    history: list[TrialRecord] = []
    for index in range(2):
        proposal = asyncio.run(proposer.propose(index, history, nothing))
        assert proposal is not None and proposal.proposer == "grid"
        history.append(TrialRecord(f"t{index}", index, proposal.params, "grid", {}))
    assert {h.params["routing.policy"] for h in history} == {"heuristic", "learned"}
    assert asyncio.run(proposer.propose(2, history, nothing)) is None


def test_subsets_on_the_grid() -> None:
    s = _space()
    assert len(space.grid_values(s.search[4])) == 7  # the non-empty subsets of three


# ------------------------------------------------------------------ the LLM proposer

@pytest.mark.parametrize(("text", "params", "reasoning"), [
    ('Sure.\n```json\n{"params": {"routing.policy": "learned"}, "reasoning": "more data"}\n```',
     {"routing.policy": "learned"}, "more data"),
    ('```\n{"params": {"routing.policy": "sft"}}\n```', {"routing.policy": "sft"}, None),
    ('I would try {"routing.policy": "heuristic", "generation.temperature": 0.2} next.',
     {"routing.policy": "heuristic", "generation.temperature": 0.2}, None),
    ('```json\nnot json\n```\n```\n{"params": {"routing.policy": "grpo"}}\n```',
     {"routing.policy": "grpo"}, None),
])
def test_answers_are_read_leniently(text: str, params: dict[str, Any],
                                    reasoning: str | None) -> None:
    assert parse_answer(text) == (params, reasoning)


@pytest.mark.parametrize("text", ["", "no idea", "```json\n[1, 2]\n```", '{"params": 3}'])
def test_unreadable_answers_are_none(text: str) -> None:
    assert parse_answer(text) is None


def test_sanitize_keeps_what_the_space_allows_and_fixed_values_win() -> None:
    kept, notes = space.sanitize({"routing.policy": "learned", "generation.temperature": 3,
                                  "routing.model_for.code": "gpt-5", "prompt.examples": 9,
                                  "colour": "red", "generation.max_tokens": 1024.0}, _space())
    assert kept == {"routing.policy": "learned", "generation.max_tokens": 1024,
                    "prompt.examples": 2}
    assert notes == ["generation.temperature: outside [0, 1]",
                     "routing.model_for.code: not one of its values",
                     "colour: not in the search space"]


class _Model:
    """A client that answers scripted texts (the LLM edge; the real client is tested against
    a server in the integration tests)."""

    def __init__(self, answers: list[str]):
        self.answers = answers
        self.prompts: list[str] = []

    async def complete_text(self, *, tenant_id: str, system: str, user: str,
                            **kwargs: Any) -> TextCompletion:
        self.prompts.append(user)
        return TextCompletion(self.answers.pop(0), 10, 10, "m", 1, 0.01)


def test_the_llm_proposer_records_parse_failures_with_fixed_values_kept() -> None:
    run = RunParams.model_validate({"space": SPACE, "proposer": "llm"})
    model = _Model(["```json\n{\"params\": {\"routing.policy\": \"bandit\", "
                    "\"routing.model_for.code\": \"gpt-4o\"}, \"reasoning\": \"explore\"}\n```",
                    "I cannot decide.",
                    '{"params": {"routing.policy": "learned"}, "reasoning": "stable"}'])
    proposer = LlmProposer(run, model, "t1")  # type: ignore[arg-type]
    nothing = Progress(None, 0, ())
    excluded = asyncio.run(proposer.propose(0, [], nothing))
    assert excluded is not None and excluded.params == {"prompt.examples": 2}
    assert "breaks a constraint" in (excluded.reasoning or "")
    failed = asyncio.run(proposer.propose(1, [], nothing))
    assert failed is not None and failed.parse_failure
    assert failed.params == {"prompt.examples": 2}
    assert "I cannot decide." in (failed.reasoning or "")
    read = asyncio.run(proposer.propose(2, [], nothing))
    assert read is not None and not read.parse_failure
    assert read.params == {"routing.policy": "learned", "prompt.examples": 2}
    assert "routing.model_for.code: one of" in model.prompts[0]
    assert "Never propose these combinations" in model.prompts[0]


def test_the_prompt_shows_history_frontier_and_merge() -> None:
    run = RunParams.model_validate({"space": SPACE})
    history = [TrialRecord(f"r-t{i}", i, {"routing.policy": "learned"}, "random",
                           {"reward": 0.5 + i / 100}) for i in range(25)]
    from services.optimizer.proposal_text import Tried
    text = build_prompt(run.space, run.objectives,
                        [Tried(t.trial_id, t.params, t.metrics) for t in history], ["r-t24"],
                        [Tried("r-t24", {"routing.policy": "learned"}, {})])
    assert "Trials so far (25, the latest 20 shown)" in text
    assert "r-t4:" not in text and "r-t5:" in text and "reward=0.74" in text
    assert "Pareto frontier: r-t24" in text and "Combine the strengths" in text
    assert "maximize reward (weight 1)" in text


def test_random_proposer_merges_from_trials() -> None:
    run = RunParams.model_validate({"space": {"search": [
        {"name": "routing.policy", "values": ["heuristic", "learned"]}]}})
    merged = asyncio.run(RandomProposer(run).merge(
        5, [], Progress(None, 0, ()),
        [TrialRecord("a", 0, {"routing.policy": "learned"}, "random", {}),
         TrialRecord("b", 1, {"routing.policy": "learned"}, "random", {})]))
    assert merged is not None and merged.params == {"routing.policy": "learned"}


# ------------------------------------------------------------------ undo

def _version(version: int, params: dict[str, Any], previous: dict[str, Any],
             trial: str | None = None, undoes: int | None = None) -> dict[str, Any]:
    return {"version": version, "params": params, "previous": previous, "run_id": "r",
            "trial_id": trial, "undoes": undoes}


def test_undo_restores_what_the_trial_changed_and_keeps_later_changes() -> None:
    history = [
        _version(1, {"routing.policy": "learned"}, {}, "t1"),
        _version(2, {"routing.policy": "bandit", "routing.model_for.code": "a"},
                 {"routing.policy": "learned"}, "t2"),
        _version(3, {"routing.policy": "sft", "routing.model_for.code": "a",
                     "generation.temperature": 0.2},
                 {"routing.policy": "bandit", "routing.model_for.code": "a"}, "t3"),
    ]
    target, params = undone(history, "r", "t2")
    # the policy changed again later (t3): it stays; the pin t2 added goes
    assert target["version"] == 2
    assert params == {"routing.policy": "sft", "generation.temperature": 0.2}
    history.append(_version(4, params, history[-1]["params"], "t2", undoes=2))
    with pytest.raises(LookupError, match="already undone"):
        undone(history, "r", "t2")
    with pytest.raises(LookupError, match="never applied"):
        undone(history, "r", "t9")
