"""Parameters and results of `optimize.*`: searching a tenant's configuration.

A run searches a space of configurations (`habitus.contract.configuration` names what may be
searched: dotted paths such as `routing.policy` or `routing.model_for.code`), trial by trial:
a proposer suggests a configuration, an evaluator measures it against the objectives, and the
run keeps the Pareto frontier and its best trial. Everything is the caller's tenant's; applying
a trial changes that tenant's configuration only, and can be undone.

The space has the shape integrators know from optimisation frameworks: `search` is a list of
dimensions `{name, type, values, low, high}` (type categorical, continuous, integer, subset or
text), `fixed` holds values every trial keeps, `constraints` the rules a proposal must respect.
Every problem is reported with the path of the field and the reason.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    model_validator,
)

from habitus.contract.configuration import (
    ConfigurationError,
    Setting,
    check_value,
    setting_of,
    validate_configuration,
)
from habitus.events.domain import OptimizationId

DimensionType = Literal["categorical", "continuous", "integer", "subset", "text"]
Metric = Literal["reward", "accuracy", "latency_seconds", "cost_usd", "tokens",
                 "energy_joules"]
#: what each metric is (the per-query mean of it, over the queries evaluated)
METRICS: dict[str, str] = {
    "reward": "the trace reward in [0, 1] (latency, cost, token efficiency, feedback, outcome)",
    "accuracy": "the share of queries answered successfully (outcome, or a reference match)",
    "latency_seconds": "seconds per query",
    "cost_usd": "US dollars per query",
    "tokens": "tokens per query",
    "energy_joules": "joules per query",
}
_SHORT_DIRECTION = {"max": "maximize", "min": "minimize"}
Direction = Annotated[Literal["maximize", "minimize"], BeforeValidator(
    lambda v: _SHORT_DIRECTION.get(v, v) if isinstance(v, str) else v)]
Proposer = Literal["random", "grid", "llm"]
Evaluator = Literal["counterfactual", "replay"]
RunState = Literal["running", "completed", "stopped", "failed"]
Path = Annotated[str, StringConstraints(min_length=1, max_length=200)]


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Result(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _fits(setting: Setting, value: Any, what: str) -> Any:
    try:
        return check_value(setting, value)
    except ValueError as exc:
        raise ValueError(f"{setting.path}: {what} {value!r} {exc}") from None


class Dimension(_Params):
    """One setting the run varies, and the values it may take (`type` in JSON, `kind` here:
    an attribute named `type` reads like an event's type to the codebase's checks)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: Path = Field(description=(
        "The setting's dotted path (`routing.policy`, `routing.model_for.code`, "
        "`generation.temperature`, ...)."))
    kind: DimensionType = Field(default="categorical", alias="type", description=(
        "categorical (one of `values`), continuous or integer (between `low` and `high`), "
        "subset (a non-empty subset of `values`), text (one of `values`, or what the LLM "
        "proposer writes)."))
    values: list[Any] | None = Field(default=None, max_length=100, description=(
        "The values a categorical, subset or text dimension may take."))
    low: float | None = Field(default=None, description="A numeric dimension's least value.")
    high: float | None = Field(default=None, description="A numeric dimension's greatest value.")
    description: str | None = Field(default=None, max_length=1000, description=(
        "What it means, for the LLM proposer's prompt."))

    @model_validator(mode="after")
    def _valid(self) -> Dimension:
        try:
            setting = setting_of(self.name)
        except LookupError as exc:
            raise ValueError(f"{self.name}: {exc}") from None
        kinds = {"categorical": ("choice", "text", "number", "integer", "flag"),
                 "continuous": ("number",), "integer": ("integer",), "subset": ("names",),
                 "text": ("text",)}
        if setting.kind not in kinds[self.kind]:
            raise ValueError(f"{self.name}: a {setting.kind} setting cannot be a {self.kind} "
                             "dimension")
        if self.kind in ("continuous", "integer"):
            if self.low is None or self.high is None:
                raise ValueError(f"{self.name}: a {self.kind} dimension needs low and high")
            low, high = (_fits(setting, self.low, "low"), _fits(setting, self.high, "high"))
            if low >= high:
                raise ValueError(f"{self.name}: low must be below high")
            self.low, self.high = low, high
            return self
        if self.kind == "subset":
            if not self.values:
                raise ValueError(f"{self.name}: a subset dimension needs values")
            self.values = _fits(setting, self.values, "values")
            return self
        if self.kind == "categorical" and not self.values:
            raise ValueError(f"{self.name}: a categorical dimension needs values")
        if self.values is not None:
            checked = [_fits(setting, v, "value") for v in self.values]
            if len({repr(v) for v in checked}) != len(checked):
                raise ValueError(f"{self.name}: values repeat")
            self.values = checked
        return self


class Exclusion(_Params):
    """A combination no trial may have: a proposal holding every one of these values."""

    when: dict[Path, Any] = Field(min_length=1, max_length=20, description=(
        "Dotted path -> value; a configuration matching all of them is excluded."))


class Constraints(_Params):
    rules: list[Annotated[str, StringConstraints(min_length=1, max_length=1000)]] = Field(
        default_factory=list, max_length=50, description=(
            "Rules in words, given to the LLM proposer (\"never route code to a model "
            "without 'code' in its name\")."))
    exclude: list[Exclusion] = Field(default_factory=list, max_length=100, description=(
        "Combinations no proposer may propose."))


class SearchSpace(_Params):
    search: list[Dimension] = Field(min_length=1, max_length=50, description="What varies.")
    fixed: dict[Path, Any] = Field(default_factory=dict, max_length=50, description=(
        "Settings every trial keeps (they override any proposal)."))
    constraints: Constraints = Field(default_factory=Constraints)

    @model_validator(mode="after")
    def _consistent(self) -> SearchSpace:
        names = [d.name for d in self.search]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"search: {', '.join(twice)} appear more than once")
        try:
            self.fixed = validate_configuration(self.fixed)
        except ConfigurationError as exc:
            raise ValueError(f"fixed: {exc}") from None
        both = sorted(set(self.fixed) & set(names))
        if both:
            raise ValueError(f"fixed: {', '.join(both)} also searched; fix it or search it")
        known = set(names) | set(self.fixed)
        for i, exclusion in enumerate(self.constraints.exclude):
            unknown = sorted(set(exclusion.when) - known)
            if unknown:
                raise ValueError(f"constraints.exclude[{i}]: {', '.join(unknown)} not in the "
                                 "space")
        return self

    def dimension(self, name: str) -> Dimension:
        return next(d for d in self.search if d.name == name)


class Objective(_Params):
    metric: Metric = Field(description=(
        "reward, accuracy, latency_seconds, cost_usd, tokens or energy_joules (per query)."))
    direction: Direction = Field(description="maximize or minimize (max, min).")
    weight: float = Field(default=1.0, gt=0, le=1000, description=(
        "Its share of the weighted score the best trial is chosen by."))


DEFAULT_OBJECTIVES: list[Objective] = [
    Objective(metric="reward", direction="maximize"),
    Objective(metric="latency_seconds", direction="minimize"),
    Objective(metric="cost_usd", direction="minimize"),
]


class BenchmarkItem(_Params):
    query: str = Field(min_length=1, max_length=20_000)
    reference: str | None = Field(default=None, max_length=20_000, description=(
        "The expected answer: an answer containing it (case and spacing aside) scores 1."))


class ReplaySettings(_Params):
    """How the replay evaluator measures a configuration: by asking the model."""

    sample: int = Field(default=20, ge=1, le=1000, description=(
        "Recorded queries replayed per trial (the most recent of the window)."))
    benchmark: list[BenchmarkItem] = Field(default_factory=list, max_length=1000, description=(
        "Queries with references to replay instead of recorded ones."))
    models: list[Annotated[str, StringConstraints(min_length=1, max_length=256)]] = Field(
        default_factory=list, max_length=50, description=(
            "The models routing may choose among when replaying (absent: those recorded)."))
    judge_model: str | None = Field(default=None, max_length=256, description=(
        "A model that scores each answer 0..1 when its query has no reference (absent: such "
        "answers have no accuracy, only latency, tokens and cost)."))

    @model_validator(mode="after")
    def _judge(self) -> ReplaySettings:
        if self.judge_model is not None and not self.judge_model.strip():
            raise ValueError("judge_model: must not be blank")
        return self


class Window(_Params):
    since: float | None = Field(default=None, ge=0, description=(
        "Only traces that started at or after (epoch seconds)."))
    until: float | None = Field(default=None, ge=0, description="Only traces that started before.")


class RunParams(Window):
    space: SearchSpace = Field(description="What the run searches.")
    objectives: list[Objective] = Field(
        default_factory=lambda: list(DEFAULT_OBJECTIVES), min_length=1, max_length=6,
        description="What the run optimises (default: reward up, latency and cost down).")
    proposer: Proposer = Field(default="random", description="random, grid or llm.")
    evaluator: Evaluator = Field(default="counterfactual", description=(
        "counterfactual (estimates from the recorded decisions and outcomes) or replay (asks "
        "the configured model)."))
    max_trials: int = Field(default=20, ge=1, le=500)
    patience: int = Field(default=5, ge=1, le=500, description=(
        "Stop after this many trials in a row without a better best trial."))
    seed: int = Field(default=0, ge=0, le=2**63 - 1, description=(
        "Seeds the random and grid proposers, so a run can be repeated."))
    best_by: Literal["weighted", "accuracy"] = Field(default="weighted", description=(
        "weighted (the objectives' weighted score) or accuracy (accuracy alone)."))
    replay: ReplaySettings | None = Field(default=None, description=(
        "The replay evaluator's settings (defaults when absent)."))

    @model_validator(mode="after")
    def _consistent(self) -> RunParams:
        metrics = [o.metric for o in self.objectives]
        twice = sorted({m for m in metrics if metrics.count(m) > 1})
        if twice:
            raise ValueError(f"objectives: {', '.join(twice)} appear more than once")
        if self.best_by == "accuracy" and "accuracy" not in metrics:
            raise ValueError("best_by: accuracy needs an accuracy objective")
        if self.evaluator == "counterfactual" and self.replay is not None:
            raise ValueError("replay: only for the replay evaluator")
        return self


class RunStarted(_Result):
    run_id: str = Field(description="The run; `optimize.status` follows it.")
    status: RunState


class RunRef(_Params):
    run_id: OptimizationId = Field(description="The run.")


class StopRun(RunRef):
    reason: str = Field(default="stopped by the tenant", max_length=2000)


class ListRuns(_Params):
    limit: int = Field(default=20, ge=1, le=200)


class RunStatus(_Result):
    run_id: str
    status: RunState
    proposer: str
    evaluator: str
    objectives: list[Objective]
    max_trials: int
    trials: int = Field(description="Trials evaluated so far.")
    best_trial_id: str | None
    frontier: list[str] = Field(description="The Pareto frontier's trial ids, in trial order.")
    stopped_early: bool = Field(description="It ended because its patience ran out.")
    reason: str | None = Field(description="Why it stopped or failed.")
    started_at: float
    ended_at: float | None


class RunList(_Result):
    runs: list[RunStatus]


class Trial(_Result):
    trial_id: str
    index: int
    params: dict[str, Any] = Field(description="The configuration tried: path -> value.")
    proposer: str = Field(description="random, grid, merge or llm.")
    reasoning: str | None
    parse_failure: bool = Field(description=(
        "The model's proposal could not be read: the fixed values were tried instead."))
    metrics: dict[str, float | None] = Field(description=(
        "Each objective's estimate (null: not supported by the evidence)."))
    intervals: dict[str, list[float]] = Field(description="95 % intervals, [low, high].")
    support: int = Field(description="The recorded decisions or replayed queries behind it.")
    refused: str | None = Field(description="Why no estimate is claimed, when none is.")
    on_frontier: bool
    best: bool


class Frontier(_Result):
    run_id: str
    status: RunState
    objectives: list[Objective]
    trials: list[Trial] = Field(description="The frontier's trials (or all, with `all`).")
    frontier: list[str]
    best_trial_id: str | None


class FrontierParams(RunRef):
    all: bool = Field(default=False, description="Every trial, not only the frontier's.")


class TrialRef(_Params):
    run_id: OptimizationId = Field(description="The run.")
    trial_id: OptimizationId = Field(description="The trial.")


class ReadConfiguration(_Params):
    pass


class ChangeConfiguration(_Params):
    params: dict[Path, Any] = Field(min_length=1, max_length=50, description=(
        "Settings to change: path -> value (null: remove the setting, back to the default)."))

    @model_validator(mode="after")
    def _valid(self) -> ChangeConfiguration:
        try:
            validate_configuration({k: v for k, v in self.params.items() if v is not None})
        except ConfigurationError as exc:
            raise ValueError(f"params: {exc}") from None
        return self


class Configuration(_Result):
    version: int = Field(description="0: nothing applied yet (the defaults).")
    params: dict[str, Any] = Field(description="The configuration: path -> value.")
    previous: dict[str, Any] = Field(description="What the latest change replaced.")
    run_id: str | None
    trial_id: str | None
    undoes: int | None
    applied_at: float | None


class EvaluateParams(Window):
    params: dict[Path, Any] = Field(max_length=50, description=(
        "The configuration to evaluate (over the current one): path -> value."))
    objectives: list[Objective] = Field(
        default_factory=lambda: list(DEFAULT_OBJECTIVES), min_length=1, max_length=6)
    evaluator: Evaluator = "counterfactual"
    replay: ReplaySettings | None = None

    @model_validator(mode="after")
    def _valid(self) -> EvaluateParams:
        try:
            self.params = validate_configuration(self.params)
        except ConfigurationError as exc:
            raise ValueError(f"params: {exc}") from None
        return self


class Estimate(_Result):
    metrics: dict[str, float | None]
    intervals: dict[str, list[float]]
    support: int
    refused: str | None


class Evaluation(_Result):
    params: dict[str, Any] = Field(description="The whole configuration evaluated.")
    estimate: Estimate = Field(description="The configuration's.")
    current: Estimate | None = Field(description=(
        "The current configuration's, for comparison (counterfactual only: a replay would "
        "cost the calls twice)."))
