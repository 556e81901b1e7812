"""Running a service: the one place that wires broker, database, cache, runners and HTTP.

Start order: bus (streams ensured) → database pool → cache → RPC subscribers → projection runners
→ HTTP. Stop order is the reverse, and every step is bounded, so SIGTERM inside Kubernetes'
grace period finishes the batch in flight (or, past the timeout, abandons it uncommitted: the
next claim starts again from the checkpoint).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
from typing import Any

import uvicorn
from fastapi import FastAPI
from faststream.nats import NatsBroker
from faststream.nats.prometheus import NatsPrometheusMiddleware
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from redis.asyncio import Redis

from habitus.bus.connect import connect, server_urls
from habitus.bus.publisher import EventPublisher
from habitus.bus.rpc import RpcClient, RpcError
from habitus.bus.streams import ensure_streams
from habitus.config import Settings
from habitus.crypto.announce import KEYS_DESTROYED, read_destroyed
from habitus.crypto.setup import keyring_from
from habitus.db.pool import open_pool
from habitus.events import CATALOG, install_keyring
from habitus.projection.erasure import erasure_for
from habitus.projection.paused import paused
from habitus.projection.runner import ProjectionRunner
from habitus.service import registry
from habitus.service.command import Commands
from habitus.service.context import ServiceContext
from habitus.service.descriptor import ServiceDescriptor, Wiring
from habitus.service.health import add_standard_routes
from habitus.service.membership import Membership
from habitus.service.watchdog import orphan_watchdog
from habitus.subjects import rpc_method, rpc_subject
from habitus.telemetry import loop_lag, metrics
from habitus.telemetry.gc_tuning import tune_gc
from habitus.topology import Topology

log = logging.getLogger(__name__)
#: RPC requests a replica handles at once. One at a time, a slow call (a judge waiting on its
#: model, a command waiting for its views) held up every other caller of the replica, the hot
#: path's reads included; the pool and the per-user locks bound what concurrency can do.
RPC_WORKERS = 16


def _require(value: str | None, name: str) -> str:
    if not value:
        raise RuntimeError(f"HABITUS_{name} is not set (habitus up starts embedded servers)")
    return value


def _topology_for(descriptor: ServiceDescriptor) -> Topology:
    """The installed services' flow, with this one in it even when it is not installed (a
    test's service): its own commands wait for its own projections."""
    found = registry.services()
    if all(s.name != descriptor.name for s in found):
        found.append(descriptor)
    return registry.topology_of(found)


async def _forget_destroyed(msg: Any) -> None:
    owner = read_destroyed(msg.data)
    if owner is not None and CATALOG.keyring is not None:
        CATALOG.keyring.forget(*owner)


class ServiceHost:
    def __init__(self, descriptor: ServiceDescriptor, settings: Settings, *,
                 http_port: int | None = None):
        self.descriptor = descriptor
        self.settings = settings
        self.ctx: ServiceContext | None = None
        #: this process among the service's replicas (None: it applies no projections)
        self.membership: Membership | None = None
        self._wiring: Wiring | None = None
        self._pings: Subscription | None = None
        self._broker: NatsBroker | None = None
        self._bulk: Client | None = None
        self._server: uvicorn.Server | None = None
        self._server_task: asyncio.Task[None] | None = None
        self._http_port = http_port
        self.bound_port: int | None = None
        self._loop_lag: asyncio.Task[None] | None = None

    @property
    def runners(self) -> list[ProjectionRunner]:
        """The runners of the partitions this process applies now."""
        return [] if self.membership is None else self.membership.runners

    def _make_broker(self) -> NatsBroker:
        d = self.descriptor
        broker = NatsBroker(
            server_urls(_require(self.settings.nats_url, "NATS_URL")),
            name=f"habitus-{d.name}",
            graceful_timeout=d.runner_config.graceful_timeout,
            max_reconnect_attempts=-1,
            reconnect_time_wait=1,
            # Fail fast while disconnected: a publish buffered during a reconnect would be
            # stored after its caller was told it failed (see habitus.bus.publisher).
            pending_size=0,
            middlewares=[NatsPrometheusMiddleware(registry=metrics.registry, app_name=d.name)],
            logger=None,
        )
        # Subjects derive from the descriptor's prefixes, so they are known before the
        # handlers exist; a request arriving before `wire` finished is told to retry. A
        # `projections` process leaves them to the service's `rpc` processes (a queue group
        # hands each request to one member at random, so a member that also applies batches
        # would keep answering some of them late). The ping is subscribed once the process
        # has started (`_answer_pings`).
        for prefix in d.rpc_prefixes if self.settings.role != "projections" else ():
            broker.subscriber(rpc_subject(prefix) + ".>", queue=d.name,
                              max_workers=RPC_WORKERS)(self._dispatch)
        return broker

    async def _answer_pings(self) -> None:
        """Join the ping's queue group now that this process has started: every process of
        the service answers it, and only a started one is asked. The ping is what `/readyz`
        (and so `habitus up`'s ready line) waits for; a member still starting would answer
        some of them "not yet" at random, so a replica starting beside running ones (a
        rolling update) would make the gateway unready. With no member yet, the ask fails at
        once (no responders). A service whose RPC prefix carries its ping answers it from its
        dispatch, "starting" until it has started."""
        d = self.descriptor
        if d.answers(d.ping_method) or self._broker is None:
            return
        pong = self._pong()

        async def answer(msg: Msg) -> None:
            await msg.respond(pong)

        self._pings = await self._broker.connection.subscribe(
            rpc_subject(d.ping_method), queue=d.name, cb=answer)

    @property
    def _rpc_only(self) -> bool:
        """A read replica: its RPC methods and nothing else (no runners, no background)."""
        return self.settings.role == "rpc"

    def _pong(self) -> bytes:
        """The ping's answer, given only by a started process (see `_answer_pings`)."""
        return b'{"result": {"status": "ok", "service": "%s"}}' % self.descriptor.name.encode()

    async def _dispatch(self, body: Any = None) -> bytes:
        # The message comes from the broker's context, not as a `NatsMessage` parameter:
        # FastDepends resolves such a parameter in a worker thread, a thread hop per request
        # on the hot path (`prompt.context`, `router.select_model`).
        assert self._broker is not None
        msg = self._broker.context.get_local("message")
        method = rpc_method(msg.raw_message.subject)
        if self._wiring is None:  # the ping too, when the prefix carries it
            return json.dumps(RpcError("unavailable", f"{self.descriptor.name} is starting; "
                                                      "retry").as_reply()).encode()
        if method == self.descriptor.ping_method:
            return self._pong()
        return await self._wiring.rpc.dispatch(method, msg.body)

    async def start(self) -> ServiceContext:
        settings = self.settings
        d = self.descriptor
        # Users' payloads are sealed on publish and opened on decode by the process's keyring
        # (habitus.crypto); every service of a deployment reads the same key store.
        install_keyring(keyring_from(settings))
        self._broker = self._make_broker()
        await self._broker.start()
        rpc_nc = self._broker.connection
        # Pulls, acks and publishes on a connection of their own: RPC (`prompt.context` on
        # every agent turn) must not queue behind a fetched batch or a pipeline of acks.
        nc = self._bulk = await connect(_require(settings.nats_url, "NATS_URL"),
                                        f"habitus-{d.name}-bulk")
        if CATALOG.keyring is not None:
            # an erasure elsewhere destroyed a user's keys: drop this process's copy now
            await nc.subscribe(KEYS_DESTROYED, cb=_forget_destroyed)
        js = nc.jetstream(timeout=10.0)
        await ensure_streams(js, settings)
        pool = await open_pool(_require(settings.database_url, "DATABASE_URL"), min_size=1,
                               max_size=10, name=d.name)
        redis = Redis.from_url(_require(settings.redis_url, "REDIS_URL"))
        publisher = EventPublisher(js)
        ctx = ServiceContext(
            name=d.name,
            settings=settings,
            nc=nc,
            js=js,
            pool=pool,
            redis=redis,
            publisher=publisher,
            rpc=RpcClient(rpc_nc, timeout=settings.rpc_timeout_seconds),
            commands=Commands(publisher, js, pool, timeout=settings.rpc_timeout_seconds,
                              topology=_topology_for(d)),
            rpc_nc=rpc_nc,
        )
        self.ctx = ctx
        wiring = await d.wire(ctx, d.load_settings())
        d.check_wiring(wiring)
        rpc_only = self._rpc_only
        if rpc_only:
            log.info("only the RPC methods run here: the projections run in the service's "
                     "other processes", extra={"service": d.name})
        elif wiring.disabled is not None:
            # The service says why, once, in its own words; this records what the host did.
            log.info("only the erasure runs, the projections pass: the service is disabled",
                     extra={"service": d.name, "reason": wiring.disabled})
        else:
            for task in wiring.background:
                task.start()
        # A disabled service passes over what its projections read (moving their checkpoints,
        # folding nothing), so nobody waits for a view it does not build.
        projections = ([paused(p) for p in wiring.projections] if wiring.disabled is not None
                       else list(wiring.projections))
        if wiring.projections and d.schema:
            # A disabled service still erases: what it folded while enabled is the user's too.
            projections.append(erasure_for(d.schema, d.projections)(wiring.projections))
        if projections and not rpc_only and d.schema:
            # the replicas of the service share the projections' partitions (each process
            # runs the share it is dealt; see habitus.service.membership)
            self.membership = Membership(
                d.name, d.schema, projections, nc, pool, partitions=settings.partitions,
                lease_seconds=settings.lease_seconds, member=settings.member,
                runner_config=d.runner_config)
            await self.membership.start()
        self._wiring = wiring
        await self._answer_pings()
        await self._start_http(ctx, wiring)
        # named as `habitus up` names the process (an RPC process apart: `<service>_rpc`)
        self._loop_lag = asyncio.create_task(loop_lag.watch(
            f"{d.name}_rpc" if rpc_only else d.name))
        tune_gc()
        log.info("service started", extra={"service": d.name, "port": self.bound_port})
        return ctx

    async def _start_http(self, ctx: ServiceContext, wiring: Wiring) -> None:
        if wiring.http_app is not None:
            app = wiring.http_app
            port = self._http_port if self._http_port is not None else self.settings.http_port
        else:
            app = FastAPI(title=f"habitus {self.descriptor.name}", docs_url=None,
                          redoc_url=None)
            port = self._http_port if self._http_port is not None else self.settings.metrics_port
        add_standard_routes(app, ctx, disabled=wiring.disabled)
        config = uvicorn.Config(
            app, host=self.settings.http_host, port=port, log_level="warning", lifespan="off",
            access_log=False,
        )
        self._server = uvicorn.Server(config)
        self._server_task = asyncio.create_task(self._server.serve())
        while not self._server.started:
            if self._server_task.done():
                self._server_task.result()
                raise RuntimeError(f"{self.descriptor.name}: HTTP server exited on start")
            await asyncio.sleep(0.02)
        sockets = self._server.servers[0].sockets
        self.bound_port = int(sockets[0].getsockname()[1])

    async def stop(self) -> None:
        ctx = self.ctx
        if self._pings is not None:  # a stopping process is no longer ready
            with contextlib.suppress(Exception):
                await self._pings.unsubscribe()
        if self._loop_lag is not None:
            self._loop_lag.cancel()
        if self._server is not None:
            self._server.should_exit = True
            if self._server_task is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self._server_task, 10)
        if self.membership is not None:
            with contextlib.suppress(Exception):
                await self.membership.stop()
        if self._wiring is not None:
            started = self._wiring.disabled is None and not self._rpc_only
            for task in self._wiring.background if started else ():
                with contextlib.suppress(Exception):
                    await task.stop()
        if self._broker is not None:
            with contextlib.suppress(Exception):
                await self._broker.stop()
        if self._bulk is not None:
            with contextlib.suppress(Exception):
                await self._bulk.drain()
        if ctx is not None:
            with contextlib.suppress(Exception):
                await ctx.commands.close()
            with contextlib.suppress(Exception):
                await ctx.redis.aclose()
            with contextlib.suppress(Exception):
                await ctx.pool.close()
        log.info("service stopped", extra={"service": self.descriptor.name})

    async def serve_forever(self) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, stop.set)
        watchdog = orphan_watchdog(stop.set)  # keep a reference: the loop holds tasks weakly
        try:
            await self.start()
        except BaseException:
            # said here, with the cause, before the process goes; what had started is let go
            # of, so nothing it left running keeps the process from exiting for a restart
            log.exception("service could not start", extra={"service": self.descriptor.name})
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.stop(), 30)
            raise
        print(f"habitus {self.descriptor.name} ready on port {self.bound_port}", flush=True)
        await stop.wait()
        await self.stop()
        if watchdog is not None:
            watchdog.cancel()
