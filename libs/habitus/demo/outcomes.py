"""What a person does after the replay, and what the system learned, checked against the story.

`act` declares habits, runs Analyze, approves suggestions and relearns routing, as each user
and tenant of the scenario would; `outcomes` reads back everything the demo shows and its test
checks (facets, PROFILE.md, an explanation, tool rules, habits, `prompt.context`, route stats,
routing decisions); `problems` lists what differs from the scenario's expectations.
"""

from __future__ import annotations

from typing import Any

from habitus.demo.api import Api
from habitus.demo.scenario import Scenario


def _when(text: str) -> str:
    text = " ".join(text.split()).rstrip(".").casefold()
    return text[5:] if text.startswith("when ") else text


def act(api: dict[str, Api], scenario: Scenario) -> dict[str, Any]:
    """Declare habits, run Analyze, approve suggestions, relearn routing; what each answered."""
    done: dict[str, Any] = {}
    for t, u in scenario.users():
        a = api[t.tenant_id]
        declared = [a.rpc("habits.declare", user_id=u.user_id, when=when, do=do)["outcome"]
                    for when, do in u.declare]
        analyzed = a.rpc("habits.analyze", user_id=u.user_id)
        approved = []
        for when in u.approve:
            habits = a.rpc("habits.list", user_id=u.user_id)["habits"]
            habit = next((h for h in habits if _when(h["when"]) == _when(when)), None)
            if habit is not None and habit["status"] == "candidate":
                approved.append(a.rpc("habits.apply_review", user_id=u.user_id,
                                      habit_id=habit["habit_id"], checksum=habit["checksum"],
                                      action="approve")["outcome"])
        done[u.user_id] = {"declared": declared, "analyzed": analyzed, "approved": approved}
    for t in scenario.tenants:
        done[t.tenant_id] = api[t.tenant_id].rpc("router.update_policy", policy="learned")
    return done


def outcomes(api: dict[str, Api], scenario: Scenario) -> dict[str, Any]:
    """Everything the demo shows and the test checks, per user and per tenant's routing."""
    out: dict[str, Any] = {}
    for t, u in scenario.users():
        a, user = api[t.tenant_id], u.user_id
        cls, key = u.explain
        out[user] = {
            "facets": a.rpc("learning.list_facets", user_id=user)["facets"],
            "profile": a.profile_md(user),
            "explain": a.call("learning.explain_facet", user_id=user,
                              **{"class": cls, "key": key}).json().get("result"),
            "rules": a.rpc("memory.tool_rule_list", user_id=user)["rules"],
            "habits": a.rpc("habits.list", user_id=user)["habits"],
            "context": a.rpc("prompt.context", user_id=user, tools=list(u.tools),
                             request=u.sample_request) if u.sample_request else None,
            "route_stats": a.rpc("traces.route_stats", user_id=user),
        }
    for t in scenario.tenants:
        a, first = api[t.tenant_id], t.users[0].user_id
        out[t.tenant_id] = [{
            "query_class": r.query_class,
            "learned": a.rpc("router.select_model", query=r.query,
                             available_models=list(r.models), policy="learned",
                             user_id=first, record=True),
            "heuristic": a.rpc("router.select_model", query=r.query,
                               available_models=list(r.models), policy="heuristic"),
            "expected": r,
        } for r in t.routing]
    return out


def route_count(stats: dict[str, Any]) -> int:
    return sum(int(row.get("count", row.get("traces", 0))) for row in stats.get("routes", []))


def _set_by_user(facet: dict[str, Any]) -> bool:
    return bool(facet.get("pinned")) or facet.get("origin") == "set_by_user"


def problems(scenario: Scenario, found: dict[str, Any], *, scripted: bool = True) -> list[str]:
    """What differs from the scenario's expectations (with a real model, the expectations that
    rest on the model's answers are not checked)."""
    bad: list[str] = []
    for t, u in scenario.users():
        got, exp, who = found[u.user_id], u.expected, f"{t.tenant_id}/{u.user_id}"
        facets = {(f["class"], f["key"]): f for f in got["facets"]}
        for e in exp.facets:
            if e.llm and not scripted:
                continue
            f = facets.get((e.class_, e.key))
            if f is None:
                bad.append(f"{who}: no facet {e.class_}/{e.key} (expected {e.value}, "
                           f"{e.state})")
            elif (f["value"].casefold(), f["state"]) != (e.value.casefold(), e.state) or \
                    (e.set_by_user != _set_by_user(f)):
                mark = ", set by the user"
                bad.append(f"{who}: {e.class_}/{e.key} is {f['value']} ({f['state']}"
                           f"{mark if _set_by_user(f) else ''}), expected {e.value} "
                           f"({e.state}{mark if e.set_by_user else ''})")
        for cls, key, value in exp.absent:
            f = facets.get((cls, key))
            if f is not None and f["value"].casefold() == value.casefold():
                bad.append(f"{who}: learned {cls}/{key}={value}, which is not theirs")
        for line in exp.profile:
            if line not in got["profile"]:
                bad.append(f"{who}: PROFILE.md lacks {line!r}")
        for r in exp.rules:
            if not any(rule["tool_name"] == r.tool and rule["priority"] == r.priority and
                       r.contains.casefold() in rule["rule"].casefold() and r.tag in rule["tags"]
                       for rule in got["rules"]):
                bad.append(f"{who}: no {r.priority} rule for {r.tool} saying {r.contains!r} "
                           f"tagged {r.tag}")
        if len(got["rules"]) != len(exp.rules):
            bad.append(f"{who}: {len(got['rules'])} tool rules, expected {len(exp.rules)}")
        for h in exp.habits:
            if h.llm and not scripted:
                continue
            habit = next((x for x in got["habits"] if _when(x["when"]) == _when(h.when)), None)
            if habit is None:
                bad.append(f"{who}: no habit 'When {h.when}'")
            elif (habit["status"], habit["review_status"], habit["origin"]) != (
                    h.status, h.review_status, h.origin) or \
                    " ".join(habit["do"].split()).casefold() != h.do.casefold():
                bad.append(f"{who}: habit 'When {h.when}' is {habit['status']}/"
                           f"{habit['review_status']}/{habit['origin']} doing {habit['do']!r}, "
                           f"expected {h.status}/{h.review_status}/{h.origin}")
        if scripted and len(got["habits"]) != len(exp.habits):
            bad.append(f"{who}: {len(got['habits'])} habits, expected {len(exp.habits)}")
        if scripted and got["context"] is not None and \
                got["context"]["steered_by"] != exp.steered_by:
            bad.append(f"{who}: prompt.context steered by {got['context']['steered_by']}, "
                       f"expected {exp.steered_by}")
        if route_count(got["route_stats"]) != exp.traces:
            bad.append(f"{who}: route_stats counts {route_count(got['route_stats'])} traces, "
                       f"expected {exp.traces}")
    for t in scenario.tenants:
        for r in found[t.tenant_id]:
            e = r["expected"]
            for policy in ("learned", "heuristic"):
                if r[policy]["model"] != getattr(e, policy):
                    bad.append(f"{t.tenant_id}: {policy} routing of the {e.query_class} query "
                               f"chose {r[policy]['model']}, expected {getattr(e, policy)}")
    return bad
