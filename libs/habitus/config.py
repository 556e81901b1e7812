"""Configuration, environment first.

An unset server URL is not an error: it means "start the embedded server", so the same settings
object drives a laptop (`habitus up`), compose and Kubernetes.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HABITUS_", extra="ignore")

    nats_url: str | None = None
    database_url: str | None = None
    redis_url: str | None = None
    data_dir: Path = Path("./var")
    http_host: str = "127.0.0.1"
    http_port: int = 8080
    # Port of the small /metrics, /healthz, /readyz server of a non-gateway service.
    metrics_port: int = 9000
    bootstrap_keys: str = ""
    admin_keys: str = ""

    llm_base_url: str | None = None
    llm_model: str | None = None
    llm_api_key: str | None = None

    raw_retention_days: float = 7.0
    dlq_retention_days: float = 30.0
    # JetStream duplicate window: how long a re-published event id is dropped by the stream.
    duplicate_window_seconds: float = 120.0
    # File storage is the production default; tests may choose memory for speed.
    stream_storage: str = Field(default="file", pattern="^(file|memory)$")
    stream_replicas: int = 1

    # Gateway limits.
    max_body_bytes: int = 4 * 1024 * 1024
    max_item_bytes: int = 256 * 1024
    max_batch_items: int = 1000
    rpc_timeout_seconds: float = 10.0
    rate_limit_per_minute: int = 12_000
    # Deeper JSON cannot be stored and read back by every consumer (serialisers and Postgres
    # jsonb recurse), so the gateway refuses it before parsing.
    max_json_depth: int = Field(default=64, ge=2, le=512)
    # How far in the future a reported time may be: clocks drift, but an event "from next
    # year" would sort after everything real and pin decisions that depend on time.
    max_clock_skew_seconds: float = Field(default=300.0, ge=0)
    # API keys answered from memory for this long; revocation takes effect within it.
    key_cache_seconds: float = Field(default=30.0, ge=0)
    # Keys remembered as valid for a database outage (least recently used dropped first).
    key_last_known_max: int = Field(default=10_000, ge=0)
    # What a 503 tells the client to wait before retrying.
    retry_after_seconds: int = Field(default=5, ge=1, le=3600)
    # Services the gateway's /readyz requires to answer (habitus up and compose set it).
    expected_services: str = ""

    log_level: str = "INFO"
    log_json: bool = True

    @field_validator("nats_url", "database_url", "redis_url", "llm_base_url", mode="before")
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


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
