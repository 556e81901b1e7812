"""The one table of RPC methods.

A service implements the methods it owns against these specs (`RpcRegistry.implement`); the
gateway answers only for names in this table and generates its OpenAPI paths from it. Adding a
method therefore means one entry here, one handler in the owning service, and nothing else.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from pydantic import BaseModel

from habitus.contract import (
    admin,
    extractor,
    habits,
    learning,
    memory,
    optimize,
    profile,
    traces,
)
from habitus.subjects import rpc_subject


@dataclass(frozen=True)
class MethodSpec:
    name: str
    #: the `habitus.services` entry point whose registry implements it
    service: str
    params: type[BaseModel]
    result: type[BaseModel]
    summary: str
    #: a command: it publishes an event and answers once its projection applied it
    changes_state: bool = False
    description: str = ""
    #: how many HABITUS_RPC_TIMEOUT_SECONDS a caller waits for it (a long command: erasure)
    timeout_factor: float = 1.0
    #: it changes (or reads the deployment's) what applies to every user of the tenant, so it
    #: needs a `tenant-admin` key (habitus.auth.roles); a function decides from the parameters
    #: when only some calls are (a tenant-scoped rule, a re-extraction of every user)
    tenant_wide: bool | Callable[[Mapping[str, Any]], bool] = False

    def __post_init__(self) -> None:
        rpc_subject(self.name)  # a name that cannot be a subject is a bug in this table


def _tenant_scoped(params: Mapping[str, Any]) -> bool:
    return params.get("scope") == "tenant"


def _every_user(params: Mapping[str, Any]) -> bool:
    return params.get("user_id") is None


def _changes_settings(params: Mapping[str, Any]) -> bool:
    """`habits.configure` with no field only reads the settings."""
    return any(value is not None for value in params.values())


_GATEWAY = "gateway"
_LEARNING = "stability_detector"
_PROFILE = "profile_renderer"
_MEMORY = "tool_memory"
_ROUTER = "trace_router"
_EXTRACTOR = "extractor"
_HABITS = "habits"
_OPTIMIZER = "optimizer"

_TABLE = (
    MethodSpec("learning.list_facets", _LEARNING, learning.ListFacets, learning.FacetList,
               "List a user's active and provisional facets"),
    MethodSpec("learning.get_facet", _LEARNING, learning.FacetParams, learning.Facet,
               "Read one facet, whatever its state"),
    MethodSpec("learning.explain_facet", _LEARNING, learning.ExplainFacet, learning.Explanation,
               "Explain a facet's state from its evidence, score by score"),
    MethodSpec("learning.cache_stats", _LEARNING, learning.CacheParams, learning.CacheStats,
               "Count a user's facets by state and class"),
    MethodSpec("learning.update_facet", _LEARNING, learning.UpdateFacet, learning.Facet,
               "Set a facet's value (and pin it)", changes_state=True),
    MethodSpec("learning.pin_facet", _LEARNING, learning.FacetParams, learning.Facet,
               "Pin a facet to its current value", changes_state=True,
               description="Conflict (409) when the facet has no value to pin."),
    MethodSpec("learning.unpin_facet", _LEARNING, learning.FacetParams, learning.UnpinResult,
               "Return a pinned or forgotten facet to automatic", changes_state=True,
               description="Conflict (409) when the facet is already automatic."),
    MethodSpec("learning.forget_facet", _LEARNING, learning.FacetParams, learning.Facet,
               "Forget a facet: it stays out of prompts whatever the evidence",
               changes_state=True),
    MethodSpec("learning.reset_cache", _LEARNING, learning.CacheParams, learning.CacheStats,
               "Clear what was learned: evidence before now is ignored", changes_state=True),
    MethodSpec("learning.rebuild_cache", _LEARNING, learning.CacheParams, learning.RebuildStats,
               "Recompute a user's cache as of now", changes_state=True),
    MethodSpec("profile.get", _PROFILE, profile.GetProfile, profile.Profile,
               "Read a user's PROFILE.md"),
    MethodSpec("profile.save_notes", _PROFILE, profile.SaveNotes, profile.NotesSaved,
               "Save the user's own notes in PROFILE.md", changes_state=True,
               description="Conflict (409) when the notes changed since `base_version`."),
    MethodSpec("prompt.context", _PROFILE, profile.PromptContextParams, profile.PromptContext,
               "What the next prompt should carry for a user",
               description="The hot path: answered from a cache invalidated by every change."),
    MethodSpec("memory.tool_rule_put", _MEMORY, memory.RulePut, memory.Rule,
               "Create or replace a tool-scoped rule", changes_state=True,
               description="An upsert: the rule keeps its `created_at`.",
               tenant_wide=_tenant_scoped),
    MethodSpec("memory.tool_rule_get", _MEMORY, memory.RuleRef, memory.Rule,
               "Read one rule", description="Not found (404) when there is no such rule."),
    MethodSpec("memory.tool_rule_list", _MEMORY, memory.RuleQuery, memory.RuleList,
               "List rules: critical first, newest first"),
    MethodSpec("memory.tool_rule_delete", _MEMORY, memory.RuleRef, memory.Deleted,
               "Delete a rule", changes_state=True,
               description="`{deleted: false}` when there was no such rule.",
               tenant_wide=_tenant_scoped),
    MethodSpec("memory.tool_rules_for_prompt", _MEMORY, memory.RulesForPrompt,
               memory.PromptRules, "The tool-rules block a prompt carries",
               description="The same bytes `prompt.context` shows for these tools."),
    MethodSpec("memory.tool_rules_json", _MEMORY, memory.ToolRules, memory.RuleList,
               "Every rule of one tool, as data"),
    MethodSpec("memory.tool_rules_recall", _MEMORY, memory.Recall, memory.RecallResult,
               "The normal-priority guidance for a tool, best match first",
               description="What an agent's memory-recall tool fetches on demand."),
    MethodSpec("router.select_model", _ROUTER, traces.SelectModel, traces.ModelChoice,
               "Choose the model for a query",
               description="By the request's policy, else the tenant's default (`learned`: "
                           "the tenant's traces once a query class has enough, else the "
                           "heuristic; the reason says which and why); `record` publishes the "
                           "decision as `RouteDecided`."),
    MethodSpec("router.set_default_policy", _ROUTER, traces.SetDefaultPolicy,
               traces.DefaultPolicy, "Set the tenant's default routing policy",
               changes_state=True,
               tenant_wide=True),
    MethodSpec("router.update_policy", _ROUTER, traces.UpdatePolicy, traces.PolicyUpdate,
               "Recompute a learned policy from the traces and publish it", changes_state=True,
               description="Publishes `RoutingPolicyUpdated` with the next version; answers "
                           "the classes whose model changed.",
               tenant_wide=True),
    MethodSpec("traces.summary", _ROUTER, traces.TraceFilter, traces.TraceSummary,
               "Counts, averages, success rate and feedback of the traces"),
    MethodSpec("traces.class_stats", _ROUTER, traces.TraceFilter, traces.ClassStatsList,
               "Per query class and model: counts, success, feedback, reward, latency, cost"),
    MethodSpec("traces.route_stats", _ROUTER, traces.TraceFilter, traces.RouteStatsList,
               "Per (model, agent): count, latency, tokens, success rate, feedback"),
    MethodSpec("traces.tool_stats", _ROUTER, traces.TraceFilter, traces.ToolStatsList,
               "Per tool: calls, latency, success rate"),
    MethodSpec("traces.list", _ROUTER, traces.TraceList, traces.TracePage,
               "Traces, newest first, a page at a time"),
    MethodSpec("traces.get", _ROUTER, traces.TraceRef, traces.TraceDetail,
               "One trace with its steps", description="Not found (404) without it."),
    MethodSpec("traces.search", _ROUTER, traces.TraceSearch, traces.TraceHits,
               "Full-text search over queries and results"),
    MethodSpec("traces.export", _ROUTER, traces.TraceList, traces.TraceExport,
               "A page of whole traces as JSON lines"),
    MethodSpec("advisor.recommendations", _ROUTER, traces.Insights, traces.AdvisorReport,
               "What the problem traces suggest changing"),
    MethodSpec("icl.examples", _ROUTER, traces.Insights, traces.IclExamples,
               "Successful, well-rated traces to show an agent as examples"),
    MethodSpec("icl.skills", _ROUTER, traces.Insights, traces.IclSkills,
               "Tool sequences that recur in good traces"),
    MethodSpec("icl.context", _ROUTER, traces.IclContextParams, traces.IclContext,
               "Worked examples and skills of the request's query class, as a prompt section",
               description=("From the user's own good traces of the same class, within the "
                            "budget; opt-in (the request's `examples`/`skills`, else the "
                            "tenant's `prompt.examples`/`prompt.skills`).")),
    MethodSpec("extraction.status", _EXTRACTOR, extractor.UserParams, extractor.Status,
               "What the LLM extractor holds for a user: summaries, windows, quarantine"),
    MethodSpec("extraction.quarantine", _EXTRACTOR, extractor.QuarantineQuery,
               extractor.QuarantineList, "The user's refused facets and outputs, with why"),
    MethodSpec("extraction.reextract", _EXTRACTOR, extractor.ReextractParams,
               extractor.Reextraction, "Extract windows again with the current prompt",
               changes_state=True,
               description=("Publishes `ReextractionRequested`; answers how many windows "
                            "are queued again (a window already extracted with this prompt "
                            "version is not)."),
               tenant_wide=_every_user),
    MethodSpec("habits.list", _HABITS, habits.ListHabits, habits.HabitList,
               "A user's habits, oldest first"),
    MethodSpec("habits.get", _HABITS, habits.HabitRef, habits.HabitDetail,
               "One habit with its audit trail", description="Not found (404) without it."),
    MethodSpec("habits.list_review", _HABITS, habits.ListReview, habits.Review,
               "What waits for a person: numbered When / Do items, duplicates grouped"),
    MethodSpec("habits.apply_review", _HABITS, habits.ApplyReview, habits.Changed,
               "Approve, reject, merge, supersede, archive or keep separate",
               changes_state=True,
               description="Conflict (409) when the checksum is stale or the action does not "
                           "apply; an approval activates only past law, conflict, duplicate "
                           "and evidence checks, else it waits (`outcome` says for what)."),
    MethodSpec("habits.declare", _HABITS, habits.Declare, habits.Changed,
               "Declare a habit directly (approved; only the repetition rule is skipped)",
               changes_state=True),
    MethodSpec("habits.edit", _HABITS, habits.Edit, habits.Changed,
               "Reword a habit; a changed wording needs a new approval", changes_state=True),
    MethodSpec("habits.enable", _HABITS, habits.Guarded, habits.Changed,
               "Switch a disabled habit back on (law and duplicates re-checked)",
               changes_state=True),
    MethodSpec("habits.disable", _HABITS, habits.Guarded, habits.Changed,
               "Switch an active habit off", changes_state=True),
    MethodSpec("habits.archive", _HABITS, habits.Guarded, habits.Changed,
               "Archive a habit", changes_state=True),
    MethodSpec("habits.set_law", _HABITS, habits.SetLaw, habits.Law,
               "Set the tenant's law for habits; active habits are re-checked",
               changes_state=True,
               tenant_wide=True),
    MethodSpec("habits.get_law", _HABITS, habits.EmptyParams, habits.Law,
               "The tenant's law for habits"),
    MethodSpec("habits.configure", _HABITS, habits.Configure, habits.TenantSettings,
               "The tenant's habit settings: retention, scheduled Analyze, project names",
               changes_state=True, description="Absent fields keep their value; `{}` reads.",
               tenant_wide=_changes_settings),
    MethodSpec("habits.analyze", _HABITS, habits.Analyze, habits.AnalyzeResult,
               "Analyze the user's unread observations into suggestions", changes_state=True,
               description="Drains what was unread when it started, in bounded batches, each "
                           "committed with its watermark.", timeout_factor=6.0),
    MethodSpec("habits.quarantine", _HABITS, habits.HabitQuarantineQuery, habits.HabitQuarantine,
               "What Analyze refused of the model's proposals for a user, with why"),
    MethodSpec("habits.select", _HABITS, habits.Select, habits.Selection,
               "The approved habits that apply to the current request (at most 3)",
               description="Fails closed: no guidance when the embedder or the judge fails."),
    MethodSpec("optimize.run", _OPTIMIZER, optimize.RunParams, optimize.RunStarted,
               "Start searching the tenant's configuration", changes_state=True,
               description=("Publishes `OptimizationRunStarted` and answers the `run_id` at "
                            "once; the trials follow as `TrialEvaluated` events "
                            "(`optimize.status`, `optimize.frontier`)."),
               tenant_wide=True),
    MethodSpec("optimize.status", _OPTIMIZER, optimize.RunRef, optimize.RunStatus,
               "A run's progress: trials so far, best trial, frontier",
               description="Not found (404) for a run the tenant does not have."),
    MethodSpec("optimize.runs", _OPTIMIZER, optimize.ListRuns, optimize.RunList,
               "The tenant's runs, newest first"),
    MethodSpec("optimize.frontier", _OPTIMIZER, optimize.FrontierParams, optimize.Frontier,
               "A run's Pareto frontier (or every trial), with params and metrics"),
    MethodSpec("optimize.stop", _OPTIMIZER, optimize.StopRun, optimize.RunStatus,
               "Stop a running run after its current trial", changes_state=True,
               description="Conflict (409) when the run has already ended.",
               tenant_wide=True),
    MethodSpec("optimize.apply", _OPTIMIZER, optimize.TrialRef, optimize.Configuration,
               "Make a trial's configuration the tenant's", changes_state=True,
               description=("Publishes `ConfigurationApplied`; answered once routing and "
                            "prompts follow it. Conflict (409) for a trial without "
                            "estimates."),
               tenant_wide=True),
    MethodSpec("optimize.undo", _OPTIMIZER, optimize.TrialRef, optimize.Configuration,
               "Undo what applying a trial changed", changes_state=True,
               description=("Restores the settings the trial's application replaced (later "
                            "changes to other settings stay). Conflict (409) when the trial "
                            "is not applied."),
               tenant_wide=True),
    MethodSpec("optimize.configure", _OPTIMIZER, optimize.ChangeConfiguration,
               optimize.Configuration,
               "Change settings of the tenant's configuration by hand", changes_state=True,
               description=("Publishes `ConfigurationApplied` (no run, no trial); answered "
                            "once routing and prompts follow it. A null value removes a "
                            "setting."),
               tenant_wide=True),
    MethodSpec("optimize.configuration", _OPTIMIZER, optimize.ReadConfiguration,
               optimize.Configuration, "The tenant's current configuration"),
    MethodSpec("optimize.evaluate", _OPTIMIZER, optimize.EvaluateParams, optimize.Evaluation,
               "Estimate one configuration against the current one, no run",
               timeout_factor=6.0),
    MethodSpec("admin.erase_user", _GATEWAY, admin.EraseUser, admin.UserErasedResult,
               "Erase everything of a user", changes_state=True,
               description=("Every view drops the user, caches and mirror files are deleted, "
                            "the user's messages are purged from the streams (the `UserErased` "
                            "tombstone stays); answered once all of it is done."),
               timeout_factor=3.0,
               tenant_wide=True),
    MethodSpec("admin.partitions", _GATEWAY, admin.PartitionsQuery, admin.Partitions,
               "Each projection's partitions: the replica applying each, how far it is",
               description=("The deployment's state, the same for every tenant (no tenant's "
                            "data): per projection and partition its state, owner, checkpoint "
                            "and lag, as `habitus partitions` shows."),
               tenant_wide=True),
)

METHODS: Mapping[str, MethodSpec] = MappingProxyType({m.name: m for m in _TABLE})
if len(METHODS) != len(_TABLE):
    raise ValueError("a method is listed twice in the RPC table")


def method_names() -> list[str]:
    return sorted(METHODS)


def conformance_problems(
    implemented: Mapping[str, Mapping[str, type[BaseModel]]],
    table: Mapping[str, MethodSpec] = METHODS,
) -> list[str]:
    """What keeps the services' registries from matching the table, given each service's
    registered methods and their parameter models. Empty when they match."""
    problems = []
    owners: Counter[str] = Counter()
    for service, methods in sorted(implemented.items()):
        for name, params in sorted(methods.items()):
            spec = table.get(name)
            if spec is None:
                problems.append(f"{service} registers {name}, which is not in the RPC table")
                continue
            owners[name] += 1
            if spec.service != service:
                problems.append(f"{name} belongs to {spec.service} but {service} implements it")
            if params is not spec.params:
                problems.append(f"{service} validates {name} with {params.__name__}, "
                                f"not the table's {spec.params.__name__}")
    for name in sorted(table):
        if owners[name] == 0:
            problems.append(f"{name} is implemented by no service")
        elif owners[name] > 1:
            problems.append(f"{name} is implemented by {owners[name]} services")
    return problems
