"""Parameters and results of `router.*`, `traces.*`, `advisor.*` and `icl.*`.

Everything is scoped to the caller's tenant; `user_id` narrows to one user where given.

Every result is a model of its own, field by field, because the gateway's OpenAPI document is
generated from these classes and clients are generated from that: a free-form result would
leave every generated client an untyped dict. The models are exactly what the trace router
answers (`extra="forbid"`, every field required, none computed), so the schema a client reads
is the one the service is held to, and validation and serialization describe a model the same
way (no `-Input`/`-Output` variants). Class names are OpenAPI component names, so they are
unique across the contract (hence `TraceSummary`, `RecordedStep`, `IclSkill`, ...).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from habitus.contract.configuration import QueryClass as QueryClass
from habitus.ids import CallerUserId

ModelName = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1,
                                             max_length=256)]
PolicyName = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1,
                                              max_length=64)]
Outcome = Literal["success", "failure", "partial", "unknown"]


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SizedModel(_Params):
    name: ModelName = Field(description="The model.")
    parameter_count_b: float | None = Field(default=None, gt=0, description=(
        "Its size in billions of parameters; absent: parsed from the name or looked up."))


class SelectModel(_Params):
    query: str = Field(min_length=1, max_length=100_000, description="What is to be answered.")
    available_models: list[ModelName | SizedModel] = Field(
        default_factory=list, max_length=200, description="The models to choose from.")
    urgency: float | None = Field(default=None, ge=0, le=1, description=(
        "0 (can wait) to 1 (answer now); above 0.8 the smallest model answers (the fastest), "
        "under the heuristic and the learned policies alike: the caller's trade of speed "
        "for what the traces favour."))
    policy: PolicyName | None = Field(default=None, description=(
        "heuristic, learned, sft, bandit or grpo; absent: the tenant's default (`learned` "
        "unless the tenant set another: its traces once a query class has enough of them, "
        "else the heuristic)."))
    default_model: ModelName | None = Field(default=None, description="Used without a signal.")
    fallback_model: ModelName | None = Field(default=None, description=(
        "Used when the default is not available."))
    user_id: CallerUserId | None = Field(default=None, description=(
        "Whose query it is: the decision is recorded under this user (absent: under the "
        "tenant)."))
    record: bool = Field(default=True, description=(
        "Publish the decision as `RouteDecided` with its propensity, so the trace that follows "
        "(reported with `decision_id`) is joined to it and an optimisation run can estimate "
        "other configurations from it; false: a dry run, not recorded."))
    decision_id: str | None = Field(default=None, min_length=1, max_length=128, description=(
        "Reproduce an earlier decision: a sampling policy (bandit, grpo) draws the same for "
        "the same id and the same learned state; absent: a new id."))


class RoutingContext(BaseModel):
    model_config = ConfigDict(extra="forbid")
    query_length: int
    has_code: bool
    has_math: bool
    has_reasoning: bool
    urgency: float
    language: str


class ModelChoice(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str = Field(description="The model chosen (\"\" when none could be).")
    policy: str = Field(description="The policy that chose it.")
    query_class: str = Field(description="code, math, short, long or general.")
    reason: str = Field(description=(
        "Why, in words: the rule or the traces that decided, and the facts they rest on."))
    context: RoutingContext
    decision_id: str = Field(description=(
        "The decision; a sampling policy chooses the same again for the same id. Report it "
        "as the trace's `decision_id`."))
    propensity: float = Field(gt=0, le=1, description=(
        "The chance the policy had of choosing this model (1: deterministic)."))
    configuration: int = Field(ge=0, description=(
        "The tenant's configuration version the decision followed (0: none applied)."))
    generation: dict[str, Any] = Field(description=(
        "What the tenant's configuration recommends generating with (`temperature`, "
        "`top_p`, `max_tokens`, `system_prompt`); empty when it sets none."))


class SetDefaultPolicy(_Params):
    policy: PolicyName = Field(description="The policy requests without one use.")


class DefaultPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")
    policy: str
    version: int


class UpdatePolicy(_Params):
    policy: PolicyName = Field(default="learned", description="The policy to recompute.")


class PolicyChange(BaseModel):
    """One query class whose model moved."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    query_class: str = Field(alias="class", description="The query class.")
    old: str | None = Field(description="Its model before; null: it was not learned yet.")
    new: str | None = Field(description="Its model now; null: it has too few traces now.")


class PolicyUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    policy: str
    version: int = Field(description="Its version after the update.")
    changes: list[PolicyChange] = Field(description="What moved: class, old model, new.")


class TraceFilter(_Params):
    user_id: CallerUserId | None = Field(default=None, description="Only this user's traces.")
    agent: str | None = Field(default=None, max_length=128)
    model: str | None = Field(default=None, max_length=256)
    outcome: Outcome | None = None
    since: float | None = Field(default=None, ge=0, description="Started at or after.")
    until: float | None = Field(default=None, ge=0, description="Started before.")
    query_class: QueryClass | None = Field(default=None, description=(
        "Only traces of this query class (code, math, short, long, general)."))


class TraceList(TraceFilter):
    limit: int = Field(default=50, ge=1, le=500)
    after: str | None = Field(default=None, max_length=512, description=(
        "The cursor a previous page returned."))


class TraceRef(_Params):
    user_id: CallerUserId = Field(description="The trace's user.")
    trace_id: str = Field(min_length=1, max_length=128)


class TraceSearch(_Params):
    text: str = Field(min_length=1, max_length=1000, description="Words of the query or result.")
    user_id: CallerUserId | None = None
    limit: int = Field(default=20, ge=1, le=200)


class Insights(_Params):
    user_id: CallerUserId | None = Field(default=None, description="Only this user's traces.")
    limit: int = Field(default=20, ge=1, le=20)
    query_class: QueryClass | None = Field(default=None, description=(
        "Only traces of this query class."))


class IclContextParams(_Params):
    user_id: CallerUserId = Field(description=(
        "Whose traces the examples come from (only theirs: never another user's, never "
        "another tenant's)."))
    request: str = Field(min_length=1, max_length=20_000, description=(
        "The user's current request: its query class picks the examples."))
    examples: int | None = Field(default=None, ge=0, le=10, description=(
        "Worked examples to include; absent: the tenant's `prompt.examples` (0 unless set)."))
    skills: bool | None = Field(default=None, description=(
        "Include the tool sequences that worked; absent: the tenant's `prompt.skills`."))
    budget_chars: int | None = Field(default=None, ge=0, le=1_000_000, description=(
        "The most characters of the section; absent: the tenant's `prompt.examples_chars` "
        "(2,000 unless set)."))




# ------------------------------------------------------------------------------ results

_CLASS = "The query's class, as the router classifies it: code, math, short, long or general."
_SUCCESS_RATE = ("Successes / traces with an outcome (success, failure, partial); 0 when none "
                 "has one.")
_AVG_FEEDBACK = "The mean of the feedback scores given; null when none was."


class _Result(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Figures(_Result):
    """What `traces.summary` and `traces.route_stats` both count, over the traces they cover."""

    successes: int = Field(ge=0, description="Traces whose outcome is success.")
    outcomes_known: int = Field(ge=0, description=(
        "Traces with an outcome of success, failure or partial (unknown and none are left out)."))
    success_rate: float = Field(ge=0, le=1, description=_SUCCESS_RATE)
    avg_feedback: float | None = Field(description=_AVG_FEEDBACK)
    feedback_count: int = Field(ge=0, description="Traces with a feedback score.")
    avg_latency: float = Field(ge=0, description="Mean total latency of a trace, in seconds.")
    avg_tokens: float = Field(ge=0, description="Mean total tokens of a trace.")
    total_tokens: int = Field(ge=0, description="Tokens of all the traces.")
    total_cost_usd: float = Field(ge=0, description=(
        "What the traces cost, in US dollars (traces without a cost count 0)."))
    avg_steps: float = Field(ge=0, description="Mean steps of a trace.")
    total_steps: int = Field(ge=0, description="Steps of all the traces.")
    tool_calls: int = Field(ge=0, description="Steps that called a tool, in all the traces.")


class StepTypeStats(_Result):
    """The steps of one step type (llm, tool, retrieval, ...) in the traces covered."""

    count: int = Field(ge=0, description="Steps of this type.")
    avg_duration: float = Field(ge=0, description="Mean duration, in seconds.")
    stdev_duration: float = Field(ge=0, description=(
        "Sample standard deviation of the duration, in seconds; 0 for one step."))
    min_duration: float = Field(ge=0, description="The shortest, in seconds.")
    max_duration: float = Field(ge=0, description="The longest, in seconds.")
    avg_prompt_tokens: float = Field(ge=0, description=(
        "Mean `output.prompt_tokens` the steps report (a step reporting none counts 0)."))
    avg_completion_tokens: float = Field(ge=0, description=(
        "Mean `output.completion_tokens` the steps report (a step reporting none counts 0)."))
    energy_joules: float = Field(description=(
        "The `metadata.energy_joules` the steps report, summed."))


class TraceSummary(_Figures):
    """`traces.summary`: the traces the filter selects, counted and averaged."""

    traces: int = Field(ge=0, description="Traces selected.")
    step_types: dict[str, StepTypeStats] = Field(description=(
        "Per step type, the figures of its steps."))
    energy_joules: float = Field(description=(
        "The `metadata.energy_joules` of every step, summed."))


class RouteStats(_Figures):
    """One (model, agent): the traces it ran."""

    model: str = Field(description="The model the traces used.")
    agent: str = Field(description="The agent that ran them.")
    count: int = Field(ge=0, description="Traces of this model and agent.")


class ClassStats(_Figures):
    """One (query class, model): the traces of that class the model ran."""

    query_class: QueryClass = Field(description=_CLASS)
    model: str = Field(description="The model the traces used.")
    count: int = Field(ge=0, description="Traces of this class and model.")
    avg_reward: float | None = Field(description=(
        "The mean trace reward (what the bandit and GRPO policies learn from); null: none."))


class ClassStatsList(_Result):
    """`traces.class_stats`."""

    classes: list[ClassStats] = Field(description="Per (class, model), by class then model.")


class RouteStatsList(_Result):
    """`traces.route_stats`."""

    routes: list[RouteStats] = Field(description="Per (model, agent), by model then agent.")


class ToolStats(_Result):
    """One tool (a step's `input.tool`, else its `metadata.tool_name`)."""

    tool_name: str = Field(description="The tool.")
    call_count: int = Field(ge=0, description="Steps that called it.")
    traces: int = Field(ge=0, description="Traces with at least one call of it.")
    successes: int = Field(ge=0, description="Calls whose step output says `success`.")
    success_rate: float = Field(ge=0, le=1, description="Successes / calls.")
    avg_latency: float = Field(ge=0, description="Mean duration of a call, in seconds.")


class ToolStatsList(_Result):
    """`traces.tool_stats`."""

    tools: list[ToolStats] = Field(description="Per tool, by name.")


class TraceRecord(_Result):
    """One stored trace, without its steps."""

    user_id: str = Field(description="Whose trace it is.")
    trace_id: str = Field(description="The run's id.")
    query: str = Field(description="What the agent was asked.")
    agent: str = Field(description="The agent that ran.")
    model: str = Field(description="The model it used.")
    engine: str = Field(description="The runtime or framework that ran it.")
    result: str = Field(description="What the agent answered.")
    outcome: Outcome | None = Field(description=(
        "How the run went: as recorded, or as later feedback said; null: not known."))
    feedback: float | None = Field(ge=0, le=1, description=(
        "The latest feedback score (with the trace or given later); null: none."))
    started_at: float = Field(description="When the run started (epoch seconds).")
    ended_at: float = Field(description="When it ended (epoch seconds).")
    total_tokens: int = Field(ge=0, description="Tokens the whole run used.")
    prompt_tokens: int | None = Field(ge=0, description=(
        "Prompt tokens its steps report, summed; null when no step reports any."))
    completion_tokens: int | None = Field(ge=0, description=(
        "Completion tokens its steps report, summed; null when no step reports any."))
    total_latency_seconds: float = Field(ge=0, description="How long the whole run took.")
    cost_usd: float | None = Field(ge=0, description="What it cost, in US dollars; null: unknown.")
    query_class: QueryClass = Field(description=_CLASS)
    tool_calls: int = Field(ge=0, description="Steps that called a tool.")
    step_count: int = Field(ge=0, description="Steps in all.")
    reward: float | None = Field(ge=0, le=1, description=(
        "The router's reward for the run (latency, cost, tokens, blended with feedback or "
        "outcome)."))


class TracePage(_Result):
    """`traces.list`: a page of traces, newest first."""

    traces: list[TraceRecord] = Field(description="The page.")
    next: str | None = Field(description=(
        "The cursor of the next page (pass it as `after`); null after the last page."))


class RecordedStep(_Result):
    """One step of a stored trace, as the agent reported it."""

    step_type: str = Field(description="What the step was (llm, tool, retrieval, ...).")
    timestamp: float = Field(description="When it started (epoch seconds).")
    duration_seconds: float = Field(ge=0, description="How long it took.")
    input: Any = Field(description="What it was given (any JSON).")
    output: Any = Field(description="What it produced (any JSON).")
    metadata: dict[str, Any] = Field(description="Anything else the agent recorded.")
    tool_name: str | None = Field(description=(
        "The tool it called (`input.tool`, else `metadata.tool_name`); null: no tool."))


class TraceDetail(TraceRecord):
    """`traces.get`: one trace with its steps."""

    steps: list[RecordedStep] = Field(description="Its steps, in order.")


class TraceHit(TraceRecord):
    """A trace that matches a search."""

    rank: float = Field(ge=0, description="How well it matches (higher first).")


class TraceHits(_Result):
    """`traces.search`."""

    traces: list[TraceHit] = Field(description="The matches, best first.")


class TraceExport(_Result):
    """`traces.export`: a page of whole traces."""

    jsonl: str = Field(description=(
        "One trace per line, as JSON with its steps (the fields of `traces.get`)."))
    count: int = Field(ge=0, description="Traces in this page.")
    next: str | None = Field(description=(
        "The cursor of the next page (pass it as `after`); null after the last page."))


class AdvisorRecommendation(_Result):
    """One piece of advice and the traces it rests on."""

    kind: Literal["agent_structure", "routing"] = Field(description=(
        "agent_structure: problem traces make too many tool calls; routing: a query class "
        "fails on its models."))
    summary: str = Field(description="What was found, in one line.")
    detail: str = Field(description="The figures behind it and what to change.")
    evidence_trace_ids: list[str] = Field(description="The traces it rests on, newest first "
                                                      "(at most 20).")


class AdvisorReport(_Result):
    """`advisor.recommendations`: what the problem traces suggest changing."""

    analyzed: int = Field(ge=0, description="Traces read.")
    problems: int = Field(ge=0, description="Of those, traces that did not succeed or were slow.")
    confidence: float = Field(ge=0, le=1, description=(
        "1 - problems / analyzed: the share of healthy traces (1 when none was analyzed)."))
    recommendations: list[AdvisorRecommendation] = Field(description=(
        "The structure advice first, then routing advice, most failures first."))


class IclExample(_Result):
    """A successful, well-rated trace worth showing an agent."""

    trace_id: str = Field(description="The trace (`traces.get` has its result).")
    query: str = Field(description="What it was asked.")
    tool_sequence: list[str] = Field(description="The tools it called, in order.")
    feedback: float = Field(ge=0, le=1, description="Its feedback score.")


class IclExamples(_Result):
    """`icl.examples`."""

    examples: list[IclExample] = Field(description="Best feedback first, then newest.")


class IclSkill(_Result):
    """A tool sequence that recurs in good traces."""

    sequence: list[str] = Field(description="The tools, in call order (2 to 4).")
    count: int = Field(ge=1, description="Times it occurs, overlapping ones included.")
    traces: int = Field(ge=1, description="Distinct traces it occurs in.")
    mean_feedback: float | None = Field(ge=0, le=1, description=(
        "Mean feedback of those traces; null when none was scored."))
    name: str = Field(description='The sequence as one name: "search -> calc".')


class IclSkills(_Result):
    """`icl.skills`."""

    skills: list[IclSkill] = Field(description="Most seen first, then longest, then by name.")


class IclContext(_Result):
    """`icl.context`: the in-context section for one request."""

    query_class: QueryClass = Field(description=_CLASS)
    section: str = Field(description=(
        "The text to add to the prompt (empty: nothing applies, or the tenant did not opt "
        "in)."))
    examples: list[str] = Field(description="The traces the examples come from.")
    skills: list[str] = Field(description='The skills included ("search -> calc").')
