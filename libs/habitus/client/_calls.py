"""What each client method asks of the gateway, built once for the sync and async clients.

A `Call` is the RPC method, its JSON params and how to read its result. The result is
validated against the method's model in the RPC table (`habitus.contract.rpc.METHODS`), the
same model the service answers with, so a result that drifts from the contract is an error
here rather than a KeyError deep in an agent. Unknown fields are ignored, not refused: a newer
gateway may add some, and an older client should keep working.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from habitus.client.errors import UnexpectedResponse
from habitus.contract.habits import AnalyzeResult, Changed, HabitDetail, HabitList, Review
from habitus.contract.learning import DroppedFacet, Explanation, Facet, FacetList, UnpinResult
from habitus.contract.memory import Deleted, Rule, RuleList
from habitus.contract.profile import PromptContext
from habitus.contract.rpc import METHODS
from habitus.contract.traces import ModelChoice

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Call(Generic[T]):
    method: str
    params: dict[str, Any]
    parse: Callable[[Any], T]

    @property
    def idempotent(self) -> bool:
        """Safe to send again after an ambiguous failure: a read, not a command. A method the
        table does not know is treated as a command."""
        spec = METHODS.get(self.method)
        return spec is not None and not spec.changes_state

    @property
    def timeout_factor(self) -> float:
        """How much longer than usual the gateway lets this method take (Analyze, erasure)."""
        spec = METHODS.get(self.method)
        return spec.timeout_factor if spec is not None else 1.0


def validate(model: type[M], result: Any, method: str) -> M:
    try:
        try:
            return model.model_validate(result, extra="ignore")
        except TypeError:  # pydantic before 2.11 has no `extra` here
            return model.model_validate(result)
    except ValidationError as exc:
        raise UnexpectedResponse(200, "unexpected_result",
                                 f"{method}: the result does not match {model.__name__} ({exc})"
                                 ) from exc


def _typed(method: str, params: Mapping[str, Any], model: type[M]) -> Call[M]:
    return Call(method, _present(params), lambda r: validate(model, r, method))


def _present(params: Mapping[str, Any]) -> dict[str, Any]:
    """Params without the ones left unset: the method's own default applies then."""
    return {k: v for k, v in params.items() if v is not None}


def raw(method: str, params: Mapping[str, Any]) -> Call[Any]:
    return Call(method, dict(params), lambda r: r)


def context(user: str, tools: Sequence[str] | None, request: str | None,
            budget_chars: int | None, history: Sequence[str]) -> Call[PromptContext]:
    return _typed("prompt.context", {
        "user_id": user, "tools": list(tools) if tools is not None else None,
        "request": request, "budget_chars": budget_chars,
        "context": list(history) or None}, PromptContext)


def facets(user: str, class_: str | None, as_of: float | None) -> Call[FacetList]:
    return _typed("learning.list_facets", {"user_id": user, "class": class_, "as_of": as_of},
                  FacetList)


def facet(user: str, class_: str, key: str) -> Call[Facet]:
    return _typed("learning.get_facet", {"user_id": user, "class": class_, "key": key}, Facet)


def explain(user: str, class_: str, key: str, as_of: float | None) -> Call[Explanation]:
    return _typed("learning.explain_facet",
                  {"user_id": user, "class": class_, "key": key, "as_of": as_of}, Explanation)


def set_facet(user: str, class_: str, key: str, value: str) -> Call[Facet]:
    return _typed("learning.update_facet",
                  {"user_id": user, "class": class_, "key": key, "value": value}, Facet)


def pin(user: str, class_: str, key: str) -> Call[Facet]:
    return _typed("learning.pin_facet", {"user_id": user, "class": class_, "key": key}, Facet)


def unpin(user: str, class_: str, key: str) -> Call[Facet | DroppedFacet]:
    method = "learning.unpin_facet"
    return Call(method, {"user_id": user, "class": class_, "key": key},
                lambda r: validate(UnpinResult, r, method).root)


def forget(user: str, class_: str, key: str) -> Call[Facet]:
    return _typed("learning.forget_facet", {"user_id": user, "class": class_, "key": key},
                  Facet)


def rules(user: str | None, tool: str | None, priority: str | None) -> Call[RuleList]:
    return _typed("memory.tool_rule_list",
                  {"user_id": user, "tool_name": tool, "priority": priority}, RuleList)


def put_rule(user: str | None, tool: str, rule: str, priority: str, tags: Sequence[str],
             rule_id: str | None, source: str | None) -> Call[Rule]:
    return _typed("memory.tool_rule_put", {
        **_scope(user), "tool_name": tool, "rule": rule, "priority": priority,
        "tags": list(tags), "id": rule_id, "source": source}, Rule)


def delete_rule(user: str | None, tool: str, rule_id: str) -> Call[bool]:
    method = "memory.tool_rule_delete"
    return Call(method, _present({**_scope(user), "tool_name": tool, "id": rule_id}),
                lambda r: validate(Deleted, r, method).deleted)


def _scope(user: str | None) -> dict[str, Any]:
    """A rule of a user, or (no user) of the whole tenant."""
    return {"user_id": user, "scope": "user"} if user is not None else {"scope": "tenant"}


def route(query: str, models: Sequence[str | Mapping[str, Any]], user: str | None,
          urgency: float | None, policy: str | None, default_model: str | None,
          fallback_model: str | None, record: bool, decision_id: str | None
          ) -> Call[ModelChoice]:
    return _typed("router.select_model", {
        "query": query,
        "available_models": [m if isinstance(m, str) else dict(m) for m in models],
        "user_id": user, "urgency": urgency, "policy": policy, "default_model": default_model,
        "fallback_model": fallback_model, "record": record or None,
        "decision_id": decision_id}, ModelChoice)


def habits(user: str, status: str | None) -> Call[HabitList]:
    return _typed("habits.list", {"user_id": user, "status": status}, HabitList)


def habit(user: str, habit_id: str) -> Call[HabitDetail]:
    return _typed("habits.get", {"user_id": user, "habit_id": habit_id}, HabitDetail)


def review(user: str) -> Call[Review]:
    return _typed("habits.list_review", {"user_id": user}, Review)


def apply_review(user: str, habit_id: str, checksum: str, action: str,
                 other_id: str | None, reason: str | None) -> Call[Changed]:
    return _typed("habits.apply_review", {
        "user_id": user, "habit_id": habit_id, "checksum": checksum, "action": action,
        "other_id": other_id, "reason": reason}, Changed)


def declare(user: str, when: str, do: str, polarity: int) -> Call[Changed]:
    return _typed("habits.declare",
                  {"user_id": user, "when": when, "do": do, "polarity": polarity}, Changed)


def analyze(user: str) -> Call[AnalyzeResult]:
    return _typed("habits.analyze", {"user_id": user}, AnalyzeResult)
