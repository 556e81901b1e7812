"""The gateway's HTTP API: batch ingest, RPC forwarding, health, metrics, OpenAPI.

Ingest is all-or-nothing by default: if any item is rejected, nothing of the batch is published
and the answer (4xx) says, per item, what was wrong. `?partial=true` publishes the valid items and
reports the rejected ones, for agents that prefer to drop bad records. What happens at publish
time (a conflict, an outage) is reported per item too; see services.gateway.publishing.
Rate limits count ingested items, not requests: one batch of 1,000 costs what 1,000 single
posts do; reads have a budget of their own, and ingest alone is slowed by backpressure when the
pipeline falls behind (services.gateway.access).
"""

from __future__ import annotations

import logging

from fastapi import FastAPI
from fastapi_offline import FastAPIOffline

from habitus.service.context import ServiceContext
from services.gateway.access import Access
from services.gateway.context_reads import ContextReads
from services.gateway.errors import install_error_handlers
from services.gateway.middleware import MetricsMiddleware
from services.gateway.openapi import install as install_openapi
from services.gateway.routes.ingest import add_ingest_route
from services.gateway.routes.profile import add_profile_route
from services.gateway.routes.readiness import add_readiness_route
from services.gateway.routes.rpc import add_rpc_route

log = logging.getLogger(__name__)


def create_app(ctx: ServiceContext, access: Access | None = None,
               contexts: ContextReads | None = None) -> FastAPI:
    """The HTTP app; `access` is built here unless the caller runs its backpressure poll, and
    `contexts` keeps nothing in memory unless the caller runs its tracking connection."""
    settings = ctx.settings
    access = access if access is not None else Access(ctx)
    # /docs and /redoc with Swagger UI's and ReDoc's assets served from the installed package,
    # not a CDN: the pages work on an air-gapped deployment. No validator badge either (Swagger
    # UI would send the document to validator.swagger.io).
    app = FastAPIOffline(
        title="Habitus gateway",
        version="1",
        description="Agents report what happened; Habitus learns, per user, what the next "
        "prompt should carry. Authenticate with `Authorization: Bearer <key>`.",
        swagger_ui_parameters={"validatorUrl": None},
    )
    app.add_middleware(MetricsMiddleware)
    install_openapi(app, settings)
    install_error_handlers(app, settings.retry_after_seconds)
    # Registration order is route order: it decides matching and the metrics' route label.
    add_ingest_route(app, ctx, access)
    add_rpc_route(app, ctx, access, contexts if contexts is not None else ContextReads())
    add_profile_route(app, ctx, access)
    add_readiness_route(app, ctx)
    return app


__all__ = ("create_app",)
