"""Configuration, environment first.

An unset server URL is not an error: it means "start the embedded server", so the same settings
object drives a laptop (`habitus up`), compose and Kubernetes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HABITUS_", extra="ignore")

    nats_url: str | None = Field(default=None, description=(
        "NATS server with JetStream; unset: `habitus up` starts an embedded one"))
    database_url: str | None = Field(default=None, description=(
        "Postgres URL; unset: `habitus up` starts an embedded one"))
    redis_url: str | None = Field(default=None, description=(
        "Redis URL; unset: `habitus up` starts an embedded one"))
    data_dir: Path = Field(default=Path("./var"), description=(
        "embedded servers' data, logs, the dev API key, PROFILE.md mirrors"))
    encrypt_events: bool = Field(default=True, description=(
        "seal each user's event payloads with a data key of their own before they are "
        "published, so erasing the user (destroying the key) leaves every copy unreadable"))
    keystore_dir: Path | None = Field(default=None, description=(
        "where users' wrapped data keys live, apart from the data (never back it up with "
        "it); unset: `<data_dir>-keys`, beside the data directory"))
    kek: str | None = Field(default=None, description=(
        "the key-encryption key, `<id>:<base64 of 32 bytes>` (a secret); unset: the ring in "
        "HABITUS_KEK_FILE"))
    kek_file: Path | None = Field(default=None, description=(
        "the key-encryption key ring, created with a fresh key on first use (mode 0600); "
        "unset: `kek.json` in the key store directory"))
    http_host: str = Field(default="127.0.0.1", description="address the HTTP servers bind")
    http_port: int = Field(default=8080, description="the gateway's HTTP port")
    metrics_port: int = Field(default=9000, description=(
        "port of a non-gateway service's /metrics, /healthz, /readyz"))
    role: str = Field(default="all", pattern="^(all|rpc|projections)$", description=(
        "what this process of its service does: `all`; `rpc`, its RPC methods only (a read "
        "replica: no projections, no background work); `projections`, all but its RPC "
        "methods, which an `rpc` process answers (`habitus up` runs the profile renderer "
        "so, keeping `prompt.context` off the projection's event loop)"))
    cpu_nice: int = Field(default=0, ge=0, le=19, description=(
        "how far below the default CPU priority this process runs (0 - 19; `habitus serve` "
        "applies it at start): `habitus up` gives HABITUS_BACKGROUND_NICE to the processes "
        "that answer no reads"))
    background_nice: int = Field(default=10, ge=0, le=19, description=(
        "the CPU priority `habitus up` lowers the processes that answer no reads by (the "
        "producers, and the projection processes of the profile renderer and the stability "
        "detector), so that on a busy machine the gateway and the RPC processes get a core "
        "first; 0: every process alike"))
    partitions: int = Field(default=1, description=(
        "partitions of every projection when its layout is first made (1, 2, 4, 8 or 16: "
        "the replicas of a service share them; a layout made before keeps its count until "
        "`habitus partitions set` changes it)"))
    lease_seconds: float = Field(default=10.0, gt=0, le=300, description=(
        "how long a replica's membership lasts without a renewal (renewed three times "
        "within it): a replica that dies without a word has its partitions taken over "
        "within about this long"))
    member: str = Field(default="", description=(
        "this replica's name among its service's replicas (on Kubernetes the pod's name); "
        "empty: the host name, the process id and a random suffix"))
    bootstrap_keys: str = Field(default="", description=(
        "`tenant:key,...` API keys ensured at start (compose, k8s secrets, tests)"))
    admin_keys: str = Field(default="", description=(
        "`key,...` admin keys ensured at start (they name a tenant with X-Habitus-Tenant)"))


    raw_retention_days: float = Field(default=7.0, description=(
        "how long HABITUS_INGEST keeps raw reports (personal text)"))
    dlq_retention_days: float = Field(default=30.0, description=(
        "how long HABITUS_DLQ keeps dead letters"))
    duplicate_window_seconds: float = Field(default=120.0, description=(
        "JetStream duplicate window: a re-published event id is dropped by the stream"))
    stream_storage: str = Field(default="file", pattern="^(file|memory)$", description=(
        "`file` (production) or `memory` (tests) storage for new streams"))
    stream_replicas: int = Field(default=1, description="stream replicas (3 on a NATS cluster)")

    max_body_bytes: int = Field(default=4 * 1024 * 1024, description=(
        "largest request body the gateway reads"))
    body_timeout_seconds: float = Field(default=30.0, gt=0, description=(
        "how long a request body may take to arrive whole (408 after)"))
    slow_body_seconds: float = Field(default=2.0, gt=0, description=(
        "a body still arriving after this long counts as a slow upload"))
    max_slow_bodies: int = Field(default=64, ge=1, description=(
        "slow uploads one gateway process lets go on at once; the next is refused at once "
        "(408), so clients trickling bytes cannot hold every connection"))
    max_item_bytes: int = Field(default=256 * 1024, description="largest single ingest item")
    max_batch_items: int = Field(default=1000, description="most items in one POST /v1/events")
    rpc_timeout_seconds: float = Field(default=10.0, description=(
        "how long an RPC (and a command's wait for its views) may take"))
    rate_limit_per_minute: int = Field(default=12_000, description=(
        "ingested items and commands (RPC calls that change state) per API key per minute; "
        "0: no limit"))
    read_rate_limit_per_minute: int = Field(default=12_000, description=(
        "reads (RPC calls that change nothing, `prompt.context` among them, and PROFILE.md) "
        "per API key per minute, a budget of their own that ingest never spends; 0: no limit"))
    read_lease_units: int = Field(default=20, ge=1, description=(
        "reads a gateway process takes from a key's per-minute read budget at once, for the "
        "`prompt.context` answers it serves from memory (at most a hundredth of the budget)"))
    gateway_local_contexts: int = Field(default=10_000, ge=0, description=(
        "`prompt.context` answers a gateway process keeps in memory between changes of their "
        "user, told of every change by Redis's client tracking; 0: every read goes to Redis"))
    # Past this lag, ingest slows the tenants who sent the backlog (services/gateway/
    # backpressure.py); reads and commands are never refused for it.
    backpressure_lag_seconds: float = Field(default=2.0, ge=0, description=(
        "pipeline lag end to end (each projection's age of the oldest event it has not "
        "applied, summed along the slowest chain: producers, learning, the renderer for a "
        "turn) past which ingest answers 429 to tenants sending at least their fair share of "
        "the backlog; 0: off. It bounds how long a quiet tenant's words wait to reach its "
        "prompt during another tenant's burst"))
    backpressure_poll_seconds: float = Field(default=1.0, gt=0, le=60, description=(
        "how often the gateway measures the pipeline lag (from JetStream) for backpressure"))
    backpressure_max_retry_after_seconds: int = Field(default=30, ge=1, le=3600, description=(
        "the longest Retry-After backpressure answers (habitus.client waits up to 30 s)"))
    # Deeper JSON cannot be stored and read back by every consumer (serialisers and Postgres
    # jsonb recurse), so the gateway refuses it before parsing.
    max_json_depth: int = Field(default=64, ge=2, le=512, description=(
        "deepest JSON nesting the gateway accepts"))
    # An event "from next year" would sort after everything real and pin decisions that
    # depend on time.
    max_clock_skew_seconds: float = Field(default=300.0, ge=0, description=(
        "how far in the future a reported time may be"))
    key_cache_seconds: float = Field(default=30.0, ge=0, description=(
        "API keys answered from memory this long; revocation takes effect within it"))
    key_last_known_max: int = Field(default=10_000, ge=0, description=(
        "keys remembered as valid through a database outage"))
    retry_after_seconds: int = Field(default=5, ge=1, le=3600, description=(
        "the Retry-After a 503 answers"))
    expected_services: str = Field(default="", description=(
        "services the gateway's /readyz requires (`habitus up` and compose set it)"))

    log_level: str = Field(default="INFO", description="log level of the services")
    log_json: bool = Field(default=True, description="structured JSON logs, one object a line")

    @field_validator("partitions")
    @classmethod
    def _partition_count(cls, value: int) -> int:
        if value < 1 or 16 % value:
            raise ValueError("HABITUS_PARTITIONS must be 1, 2, 4, 8 or 16 (they share 16 slots)")
        return value

    @field_validator("nats_url", "database_url", "redis_url", mode="before")
    @classmethod
    def _blank_is_unset(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value

    def bootstrap_key_pairs(self) -> list[tuple[str, str]]:
        """`tenant:key,...` → [(tenant, key)]; whitespace and empty entries are ignored."""
        return _parse_pairs(self.bootstrap_keys, "HABITUS_BOOTSTRAP_KEYS")

    def expected_service_list(self) -> list[str]:
        return [s.strip() for s in self.expected_services.split(",") if s.strip()]

    def admin_key_list(self) -> list[str]:
        return [k.strip() for k in self.admin_keys.split(",") if k.strip()]


def _parse_pairs(raw: str, name: str) -> list[tuple[str, str]]:
    pairs: list[tuple[str, str]] = []
    for entry in raw.split(","):
        entry = entry.strip()
        if not entry:
            continue
        tenant, sep, key = entry.partition(":")
        if not sep or not tenant.strip() or not key.strip():
            raise ValueError(f"{name}: entry {entry!r} is not of the form tenant:key")
        pairs.append((tenant.strip(), key.strip()))
    return pairs


def keystore_path(settings: Settings) -> Path:
    """The key store directory: set, or beside the data directory (not in it, so a copy of
    the data directory carries no keys)."""
    if settings.keystore_dir is not None:
        return settings.keystore_dir
    data = settings.data_dir.resolve()
    return data.with_name(f"{data.name}-keys")


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()


def _shown(value: object) -> str:
    if value is None:
        return "unset"
    if isinstance(value, Path):
        return f"`{value if value.is_absolute() else f'./{value}'}`"
    if isinstance(value, str):
        return f"`{value}`" if value else "empty"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, dict | list):
        return f"`{json.dumps(value, separators=(',', ':'))}`"
    return f"`{value}`"


def _nested(annotation: object) -> type[BaseSettings] | None:
    """A field holding settings of their own (read from their own prefix), e.g. the LLM
    client's inside a service's."""
    if isinstance(annotation, type) and issubclass(annotation, BaseSettings):
        return annotation
    return None


def _expanded(classes: Iterable[type[BaseSettings]]) -> Iterable[type[BaseSettings]]:
    for cls in classes:
        yield cls
        for field in cls.model_fields.values():
            nested = _nested(field.annotation)
            if nested is not None:
                yield from _expanded([nested])


def settings_table(classes: Iterable[type[BaseSettings]]) -> str:
    """A Markdown table of every setting of `classes`: variable, default, what it is for.

    The README's settings list is this table, and a test compares the two, so a setting added
    to any settings class without its line in the README fails the suite."""
    rows = ["| variable | default | what it is for |", "| --- | --- | --- |"]
    seen: set[type[BaseSettings]] = set()
    for cls in _expanded(classes):
        if cls in seen:
            continue
        seen.add(cls)
        prefix = str(cls.model_config.get("env_prefix", ""))
        for name, field in cls.model_fields.items():
            if _nested(field.annotation) is not None:
                continue  # listed under its own prefix, by _expanded
            if field.validation_alias is not None:
                continue  # another class's variable, read here too: listed with its owner
            if not field.description:
                raise ValueError(f"{cls.__name__}.{name} has no description")
            default = field.get_default(call_default_factory=True)
            rows.append(f"| `{(prefix + name).upper()}` | {_shown(default)} | "
                        f"{field.description} |")
    return "\n".join(rows) + "\n"
