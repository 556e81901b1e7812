"""The gateway service: the only door agents use (HTTP), mapped onto the bus."""

from __future__ import annotations

import logging
from typing import Any

from habitus.auth import keys
from habitus.context_cache import PREFIX
from habitus.service.context import ServiceContext
from habitus.service.descriptor import Background, ServiceDescriptor, Wiring
from services.gateway.access import Access
from services.gateway.admin import AdminRpc
from services.gateway.app import create_app
from services.gateway.context_reads import ContextReads
from services.gateway.context_tracking import TrackingFeed
from services.gateway.local_contexts import LocalContexts
from services.gateway.revocations import RevocationListener

log = logging.getLogger(__name__)


async def ensure_configured_keys(ctx: ServiceContext) -> None:
    """HABITUS_BOOTSTRAP_KEYS and HABITUS_ADMIN_KEYS exist after start (compose, k8s, tests)."""
    for tenant, key in ctx.settings.bootstrap_key_pairs():
        if await keys.store_key(ctx.pool, tenant, key, label="bootstrap"):
            log.info("bootstrap key stored", extra={"tenant": tenant,
                                                    "key_prefix": keys.key_prefix(key)})
    for key in ctx.settings.admin_key_list():
        await keys.store_key(ctx.pool, "admin", key, is_admin=True, label="admin")


def context_reads(settings: Any) -> tuple[ContextReads, tuple[Background, ...]]:
    """How `prompt.context` hits are read: from memory, kept current by a tracking connection
    to Redis (which runs beside the HTTP server), unless HABITUS_GATEWAY_LOCAL_CONTEXTS is 0."""
    if settings.gateway_local_contexts <= 0 or not settings.redis_url:
        return ContextReads(), ()
    local: LocalContexts
    feed = TrackingFeed(settings.redis_url, PREFIX, on_keys=lambda keys: local.changed(keys),
                        on_reset=lambda: local.reset())
    local = LocalContexts(settings.gateway_local_contexts, feed)
    return ContextReads(local), (feed,)


async def wire(ctx: ServiceContext, settings: Any) -> Wiring:
    await ensure_configured_keys(ctx)
    access = Access(ctx)
    revocations = RevocationListener(ctx.nc, access.keys)
    await revocations.subscribe()
    contexts, tracking = context_reads(ctx.settings)
    # The backpressure poll runs beside the HTTP server, started and stopped by the host.
    return Wiring(rpc=AdminRpc(ctx).registry, http_app=create_app(ctx, access, contexts),
                  background=(access.backpressure, revocations, *tracking))


service = ServiceDescriptor(
    name="gateway",
    deploy_name="gateway",
    schema="gateway",
    rpc_prefixes=("admin",),
    wire=wire,
    migrations="services.gateway.migrations",
    public_http=True,
)
