"""The profile renderer's metrics: PROFILE.md versions written, and `prompt.context` (the hot
path of every agent turn): its latency and its cache's hits and misses."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

from habitus.telemetry.metrics import registry

RENDERS = Counter(
    "habitus_profile_renders_total",
    "PROFILE.md versions committed, by origin (render: the facets or accounts changed; notes: "
    "the user saved notes). Unchanged renders are not counted.",
    ["origin"], registry=registry,
)
CONTEXT_SECONDS = Histogram(
    "habitus_prompt_context_duration_seconds",
    "prompt.context latency in the profile renderer (the habits.select call included when a "
    "request is given), by how the context was had (hit, miss: built; coalesced: a build "
    "under way was joined; uncached: no cache).",
    ["cache"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
    registry=registry,
)
CACHE_HITS = Counter(
    "habitus_prompt_context_cache_hits_total",
    "prompt.context answered from the Redis context cache.", registry=registry,
)
CACHE_COALESCED = Counter(
    "habitus_prompt_context_coalesced_total",
    "prompt.context misses answered by a build of the same user's context (same variant, "
    "fresh enough) already under way, instead of reading Postgres again.",
    registry=registry,
)
CACHE_MISSES = Counter(
    "habitus_prompt_context_cache_misses_total",
    "prompt.context built from Postgres (not cached, or the user's cache generation moved).",
    registry=registry,
)
CONTEXT_REFRESHES = Counter(
    "habitus_prompt_context_refreshes_total",
    "Prompt context variants built again after their user changed, before anyone asked "
    "(stored; superseded: a later change turned the put away; failed: a round that could not "
    "read, counted per user).",
    ["outcome"], registry=registry,
)
