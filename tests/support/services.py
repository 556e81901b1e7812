"""Running real services in-process for tests: the same ServiceHost `habitus serve` uses."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from pydantic import BaseModel

from habitus.bus.rpc import RpcContext, RpcError, RpcRegistry
from habitus.config import Settings
from habitus.service.context import ServiceContext
from habitus.service.descriptor import ServiceDescriptor, Wiring
from habitus.service.host import ServiceHost


class WhoAmI(BaseModel):
    user_id: str
    fail: str | None = None


def echo_spec(name: str = "echo") -> ServiceDescriptor:
    """A tiny service answering `<name>.whoami`: shows which tenant the gateway forwarded."""
    registry = RpcRegistry()

    @registry.method(f"{name}.whoami", WhoAmI)
    async def whoami(params: WhoAmI, ctx: RpcContext) -> dict[str, Any]:
        if params.fail:
            raise RpcError(params.fail, f"asked to fail with {params.fail}")
        return {"tenant_id": ctx.tenant_id, "user_id": params.user_id}

    async def wire(ctx: ServiceContext, settings: Any) -> Wiring:
        return Wiring(rpc=registry)

    return ServiceDescriptor(name=name, deploy_name=name.replace("_", "-"),
                             rpc_prefixes=(name,), wire=wire)


@asynccontextmanager
async def running(spec: ServiceDescriptor, settings: Settings) -> AsyncIterator[ServiceHost]:
    host = ServiceHost(spec, settings, http_port=0)
    await host.start()
    try:
        yield host
    finally:
        await host.stop()


@asynccontextmanager
async def every_service(settings: Settings, presets: dict[str, Any] | None = None
                        ) -> AsyncIterator[ServiceHost]:
    """Every installed service (a service added later included), the gateway last; yields the
    gateway's host. `presets` replaces a service's settings by its name."""
    from contextlib import AsyncExitStack

    from habitus.service import registry

    descriptors = registry.services()
    ordered = [d for d in descriptors if not d.public_http] + [
        d for d in descriptors if d.public_http]
    async with AsyncExitStack() as stack:
        host = None
        for descriptor in ordered:
            preset = (presets or {}).get(descriptor.name)
            host = await stack.enter_async_context(running(descriptor.configured(preset),
                                                           settings))
        assert host is not None
        yield host


async def skip_history(database_url: str, nats_url: str, schema: str, projection: str,
                       stream: str = "HABITUS_INGEST") -> None:
    """Start `projection` at the stream's end, as a service enabled today that chose not to
    read what is already retained would: its first run reads only this module's events.

    For services whose work per event is a model call (the extractor): in a shared test
    stream, every earlier module's material would otherwise be queued ahead of the test's."""
    import nats
    import psycopg
    from nats.js.errors import NotFoundError

    nc = await nats.connect(nats_url)
    try:
        info = await nc.jetstream().stream_info(stream)
    except NotFoundError:
        return  # no stream yet (a worker's first stack): no history to skip
    finally:
        await nc.close()
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        await conn.execute(
            f"""INSERT INTO {schema}.projection_checkpoints (projection, last_seq)
                VALUES (%s, %s) ON CONFLICT (projection, parts, part) DO UPDATE
                SET last_seq = GREATEST({schema}.projection_checkpoints.last_seq,
                                        EXCLUDED.last_seq)""",
            (projection, info.state.last_seq))


async def skip_all_history(database_url: str, nats_url: str) -> None:
    """`skip_history` for every installed service's projections: a module that starts the whole
    system in-process on the worker's shared streams folds only its own material, not first
    everything the worker's earlier modules ingested (tens of thousands of events late in a
    run, which its waits would spend their deadlines on)."""
    from habitus.service import registry

    for descriptor in registry.services():
        if descriptor.schema:
            for projection in descriptor.projections:
                await skip_history(database_url, nats_url, descriptor.schema, projection.name,
                                   projection.stream)


@contextmanager
def isolated_database(database_url: str) -> Iterator[str]:
    """A fresh, migrated database on the same server (dropped after): for a module whose
    checkpoints must match a bus of its own."""
    import uuid
    from urllib.parse import urlsplit, urlunsplit

    import psycopg

    from habitus.service.migrations import migrate

    name = f"habitus_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = urlunsplit(urlsplit(database_url)._replace(path=f"/{name}"))
    try:
        migrate(url)
        yield url
    finally:
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def own_bus_and_database(servers: Any, root: Any) -> Iterator[Any]:
    """`servers` with a NATS server (its store under `root`) and a migrated database of the
    module's own, the suite's Redis: for a module that rebuilds a projection from the start of
    its streams. On the worker's shared bus a rebuild from sequence 1 folds every earlier
    module's events first (tens of thousands late in a run), and its wait ran out."""
    from habitus.runtime.embedded import EmbeddedNats
    from tests.conftest import ServerUrls

    bus = EmbeddedNats(root)
    url = bus.start()
    try:
        with isolated_database(servers.database) as database:
            yield ServerUrls(nats=url, database=database, redis=servers.redis, data_dir=root)
    finally:
        bus.stop()


@asynccontextmanager
async def learning_stack(database: str, settings: Settings) -> AsyncIterator[str]:
    """What a statement goes through on its way to the prompt, as deployed (the scheduler on):
    the producers, the learning cache, the renderer and the gateway; yields the gateway's URL."""
    from habitus.service.migrations import migrate
    from services.gateway.main import service as gateway
    from services.producers.main import build as producers
    from services.profile_renderer.main import build as profile_renderer
    from services.stability_detector.main import build as learning
    from services.stability_detector.settings import LearningSettings

    migrate(database)
    async with running(producers(), settings), \
            running(learning(LearningSettings()), settings), \
            running(profile_renderer(), settings), \
            running(gateway, settings) as host:
        yield f"http://127.0.0.1:{host.bound_port}"
