"""The profile-renderer service: PROFILE.md versions, their mirror, `profile.*`,
`prompt.context`."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from habitus.service.context import ServiceContext
from habitus.service.spec import ServiceSpec
from services.profile_renderer.cache import ContextCache
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


def build(settings: ProfileSettings | None = None) -> ServiceSpec:
    config = settings or ProfileSettings()
    accounts = AccountsProjection()
    render = RenderProjection()
    rpc = ProfileRpc(render)

    async def start(ctx: ServiceContext) -> None:
        cache = ContextCache(ctx.redis, config.context_cache_ttl_seconds)
        mirror = Mirror(ctx, ctx.settings.data_dir.resolve()) if config.mirror else None
        rpc.bind(ctx, cache)

        async def committed(users: set[tuple[str, str]]) -> None:
            await cache.invalidate(users)
            if mirror is not None:
                await mirror.sync(users)

        render.set_hooks(after_commit=committed, before_commit=cache.mark_changed)

    return ServiceSpec(
        name="profile_renderer",
        projections=lambda ctx: [accounts, render],
        rpc=rpc.registry,
        on_start=[start],
    )


def service() -> ServiceSpec:
    return build()
