"""`make load`: a realistic mix driven through a running Habitus, and what the pipeline costs.

`mix` builds the traffic (pure, seeded), `locustfile` sends it (the only module locust and
gevent ever see), `run` orchestrates a run from outside the locust process, `snapshot`,
`baseline` and `latency` measure, `report` writes what was measured. docs/load.md says how to
read the report.
"""
