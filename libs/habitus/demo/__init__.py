"""`habitus demo`: three weeks of two companies' agents, replayed through the gateway, then
what Habitus learned about each user, checked against what the story says it should learn.

The scenario is `examples/scenarios/three_weeks.py` (two tenants, four users, each with a
story and its expected outcome); its LLM parts (the extractor, habits' Analyze and judge) are
answered by `examples/scenarios/scripted_model.py` unless `HABITUS_LLM_BASE_URL` and
`HABITUS_LLM_MODEL` name a real model. Everything goes through the public HTTP API with tenant
keys, as an integrator's agents would send it; the demo reads Postgres and NATS only to show how
far each projection has come (stream sequence against checkpoint).

It runs in a sandbox of its own: the only tenants there are the scenario's, and the scripted
model is wired into that sandbox's services alone. The package, one concern a module:

* `system`: `habitus demo` itself, `habitus up` in a sandbox with the demo as its guest;
* `sandbox`: the sandbox's directory and settings, and its removal;
* `model`: the scenario's scripted model for the sandbox's services, and `scripted_llm`, the
  small OpenAI-compatible server it runs on (a test-and-demo tool);
* `scenario`: the scenario, loaded from the repository's examples, and its items in order;
* `api`: one tenant's view of the gateway, and a key per tenant;
* `progress`: waiting until every projection and every user caught up;
* `outcomes`: what a person does afterwards, what was learned, what differs from the story;
* `show`: the tables and panels, and the lines to try after `--keep`;
* `run`: `run_demo`, all of it on a running system.

The steps are plain functions so that `tests/e2e/test_scenario.py` replays the same scenario
the same way: `configure`, `send`, `wait_caught_up`, `act`, `outcomes`, `problems`.

Only the CLI imports this package (`habitus demo`); no service and no lower layer of the
library does (the import-linter contracts in pyproject.toml).
"""
