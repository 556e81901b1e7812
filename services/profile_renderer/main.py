"""The profile-renderer service: PROFILE.md versions, their mirror, `profile.*`,
`prompt.context`."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from habitus.service.context import ServiceContext
from habitus.service.descriptor import ServiceDescriptor, Wiring
from services.profile_renderer import store
from services.profile_renderer.cache import ContextCache
from services.profile_renderer.contexts import ContextBuilder, Refresher
from services.profile_renderer.mirror import Mirror
from services.profile_renderer.projection import AccountsProjection, RenderProjection
from services.profile_renderer.rpc import ProfileRpc


class ProfileSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HABITUS_PROFILE_", extra="ignore")

    mirror: bool = Field(default=False, description=(
        "write each user's PROFILE.md under HABITUS_DATA_DIR/workspaces (`habitus up` turns "
        "it on)"))
    context_cache_ttl_seconds: int = Field(default=3600, description=(
        "how long a cached prompt context may live"))
    context_refresh: bool = Field(default=True, description=(
        "after a user's context changes, build again the variants their readers asked for, so "
        "the next `prompt.context` is a cache hit rather than a build"))
    context_refresh_window_seconds: int = Field(default=600, ge=1, description=(
        "a variant is rebuilt after changes for this long after a read last missed it"))
    context_refresh_variants: int = Field(default=8, ge=1, description=(
        "at most this many variants a user are rebuilt after a change (the latest asked)"))


async def wire(ctx: ServiceContext, settings: ProfileSettings) -> Wiring:
    cache = ContextCache(ctx.redis, settings.context_cache_ttl_seconds,
                         settings.context_refresh_window_seconds)
    mirror = (Mirror(ctx.pool, ctx.publisher, ctx.settings.data_dir.resolve())
              if settings.mirror else None)
    # Started only where the projections run (a read replica runs no background work).
    refresher = (Refresher(ContextBuilder(ctx.pool, cache, RenderProjection.name),
                           window=settings.context_refresh_window_seconds,
                           limit=settings.context_refresh_variants)
                 if settings.context_refresh else None)
    return Wiring(rpc=ProfileRpc(ctx, cache).registry,
                  projections=[AccountsProjection(), RenderProjection(cache, mirror, refresher)],
                  background=[refresher] if refresher is not None else [])


service = ServiceDescriptor(
    name="profile_renderer",
    deploy_name="profile-renderer",
    schema=store.SCHEMA,
    rpc_prefixes=("profile", "prompt"),
    projections=(AccountsProjection, RenderProjection),
    settings=ProfileSettings,
    wire=wire,
    migrations="services.profile_renderer.migrations",
    # `prompt.context` is read on every agent turn; its misses are built apart from the
    # batches of `profile.render`, which keep this process's event loop busy under load.
    rpc_apart=True,
)


def build(settings: ProfileSettings | None = None) -> ServiceDescriptor:
    """The service with these settings instead of the environment's (tests, benchmarks)."""
    return service.configured(settings)
