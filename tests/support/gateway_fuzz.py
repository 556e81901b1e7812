"""The schemathesis side of `tests/e2e/test_api_fuzz.py`, in a process of its own.

``python -m tests.support.gateway_fuzz fuzz <base_url> <key> <tenant>`` (or ``lifecycle <base_url>
<key> <user>``) prints one JSON object: the failures by operation, or the answers.

A process of its own because the gateway under test answers in the test's process: CPython
3.11.7 keeps one interpreter-wide counter while converting syntax trees, so hypothesis parsing
source in one thread while the gateway formats a traceback in another (both parse with `ast`)
could fail either with "AST constructor recursion depth mismatch" (a CPython bug, fixed in
3.11.8). Two processes share no counter.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import hypothesis
import schemathesis
from hypothesis import HealthCheck, Phase
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

#: examples per operation and generation mode: enough to reach every documented branch of a
#: small schema, few enough for the whole run to stay well under a minute on two cores
EXAMPLES = 20
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_headers_conformance, response_schema_conformance]


def fuzz(base_url: str, key: str, tenant: str) -> dict[str, str]:
    """Every operation's failures, by operation; empty when none failed.

    Valid requests name the key's own tenant when they send X-Habitus-Tenant: a random one is
    refused (403) before anything else is looked at, and would spend most examples there."""
    schema = schemathesis.openapi.from_url(f"{base_url}/openapi.json")
    headers = {"Authorization": f"Bearer {key}"}
    failures: dict[str, str] = {}
    for result in schema.get_all_operations():
        operation = result.ok()
        for mode in (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE):

            fixed = ({"X-Habitus-Tenant": tenant}
                     if mode is schemathesis.GenerationMode.POSITIVE else None)

            @hypothesis.settings(max_examples=EXAMPLES, derandomize=True, database=None,
                                 deadline=None, phases=[Phase.explicit, Phase.generate],
                                 suppress_health_check=list(HealthCheck))
            @hypothesis.given(case=operation.as_strategy(mode, headers=fixed))
            def run(case: schemathesis.Case) -> None:
                case.call_and_validate(base_url=base_url, headers=headers, checks=CHECKS,
                                       timeout=30)

            try:
                run()
            except (Exception, BaseExceptionGroup) as exc:  # collected, then reported together
                failures[f"{operation.method.upper()} {operation.path} ({mode.value})"] = (
                    f"{type(exc).__name__}: {exc}")
    return failures


def lifecycle(base_url: str, key: str, user: str) -> dict[str, Any]:
    """One facet and one profile through every method, each answer checked against the document
    like a fuzzed one: random users rarely reach a facet that exists, so the results of pin,
    unpin, explain and the rest are only seen here."""
    schema = schemathesis.openapi.from_url(f"{base_url}/openapi.json")
    headers = {"Authorization": f"Bearer {key}"}
    answers: dict[str, Any] = {}

    def call(path: str, body: Any = None, *, label: str | None = None, method: str = "POST",
             **kwargs: Any) -> Any:
        case = schema[path][method].Case(body=body, **kwargs) if body is not None else \
            schema[path][method].Case(**kwargs)
        response = case.call_and_validate(base_url=base_url, headers=headers, checks=CHECKS,
                                          timeout=30)
        markdown = path.endswith(".md") and response.status_code == 200
        answers[label or path] = (response.status_code,
                                  response.text if markdown else response.json())
        return answers[label or path][1]

    facet = {"user_id": user, "class": "style", "key": "verbosity"}
    call("/v1/rpc/learning.rebuild_cache", {"user_id": user})
    call("/v1/rpc/learning.list_facets", {"user_id": user})
    call("/v1/rpc/learning.get_facet", facet)
    call("/v1/rpc/learning.explain_facet", facet, label="explain")
    call("/v1/rpc/learning.pin_facet", facet)
    call("/v1/rpc/learning.explain_facet", facet, label="explain pinned")
    call("/v1/rpc/learning.unpin_facet", facet, label="unpin with evidence")
    call("/v1/rpc/learning.forget_facet", facet)
    call("/v1/rpc/learning.unpin_facet", facet, label="unpin forgotten")
    tone = {"user_id": user, "class": "style", "key": "tone"}
    call("/v1/rpc/learning.update_facet", {**tone, "value": "formal"})
    call("/v1/rpc/learning.unpin_facet", tone, label="unpin without evidence")
    call("/v1/rpc/learning.unpin_facet", tone, label="unpin again")
    call("/v1/rpc/learning.cache_stats", {"user_id": user})
    call("/v1/rpc/learning.reset_cache", {"user_id": user})
    profile = call("/v1/rpc/profile.get", {"user_id": user})["result"]
    notes = profile["markdown"] + "\nI prefer answers in French.\n"
    call("/v1/rpc/profile.save_notes", {"user_id": user, "markdown": notes,
                                        "base_version": profile["version"]})
    call("/v1/rpc/profile.save_notes", {"user_id": user, "markdown": notes,
                                        "base_version": profile["version"]}, label="stale save")
    call("/v1/rpc/prompt.context", {"user_id": user, "tools": ["search"], "budget_chars": 4000})
    call("/v1/users/{user_id}/profile.md", method="GET", path_parameters={"user_id": user})
    return answers



def main(argv: list[str]) -> int:
    what, base_url, key, subject = argv
    if what == "fuzz":
        print(json.dumps(fuzz(base_url, key, subject)))
    elif what == "lifecycle":
        print(json.dumps(lifecycle(base_url, key, subject)))
    else:
        raise SystemExit(f"unknown run {what!r}: fuzz or lifecycle")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
