"""`habitus up`: the whole system on one machine, from nothing but Python.

Fills in whatever the environment does not configure (embedded NATS, Postgres, Redis under
HABITUS_DATA_DIR), migrates, starts every service as a supervised process and the gateway, and
prints where to reach it. A second run reuses the data directory.

Something can run with the system and on it alone: a `Guest` (the demo, `habitus demo`, whose
`habitus.demo.system` runs `up` in a sandbox of its own with the demo as guest). `up` asks the
guest whether these settings will do, what its services' environment needs, and runs it once
the gateway is ready; it knows nothing of what the guest does, so the runtime never imports the
demo.

One `habitus up` owns a data directory at a time (an flock, see :mod:`habitus.runtime.state`).
Everything it starts is supervised: a service or an embedded server that dies is restarted with
backoff, servers on the same data and ports so the services' clients reconnect by themselves,
with one line in the terminal per restart. Nothing it starts outlives it (parent-death signals,
see :mod:`habitus.runtime.lifetime`), and a start after a crash stops what was left anyway.

Long on purpose: the start-up order (servers, the optional NATS cluster, migrations, streams,
services, gateway) and the shutdown that reverses it read best in one place.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from habitus.auth.keys import generate_key
from habitus.bus import connect, ensure_streams
from habitus.config import Settings, keystore_path
from habitus.runtime.embedded import (
    EmbeddedNats,
    EmbeddedNatsCluster,
    EmbeddedPostgres,
    EmbeddedRedis,
    EmbeddedServer,
    EmbeddedServerError,
    free_port,
)
from habitus.runtime.forkserver import ForkServer, Preforked
from habitus.runtime.guest import Guest, System
from habitus.runtime.lifetime import ProcessRef
from habitus.runtime.state import (
    RUNTIME_FILE,
    AlreadyRunning,
    InstanceLock,
    clean_leftovers,
    port_in_use,
    runtime_file,
    write_runtime,
)
from habitus.runtime.supervisor import (
    ProcessSpec,
    Supervised,
    Supervisor,
    backoff_delay,
    describe_exit,
)
from habitus.service import registry
from habitus.service.migrations import migrate
from habitus.tasks import stop_task

__all__ = ["RUNTIME_FILE", "Guest", "System", "Up", "runtime_file", "up"]

log = logging.getLogger(__name__)

DEV_TENANT = "dev"
#: A server that stayed up this long counts as healthy again: its next crash restarts fast.
STABLE_AFTER_SECONDS = 60.0
#: stream replicas on the local cluster of `up --nats-cluster` (one per node)
CLUSTER_REPLICAS = 3
#: What `habitus serve` imports before it serves (the CLI, every service's descriptor through
#: the registry, the host, logging, the event loop), the sentence encoder's model, which
#: three services load on their first turn, and the city gazetteer, which every service that
#: checks a location facet's value loads on the first one (70 MB each, and under load a
#: service's memory grew by it minutes into the run): the fork server loads it all once, and
#: the forked services share its memory.
SERVICE_PRELOAD = (
    "habitus.cli", "habitus.cli.serve", "habitus.service.registry:services",
    "habitus.service.host", "habitus.telemetry.logging", "uvloop", "habitus.encoder:warm",
    "habitus.vocabulary.places:warm",
)


def public_services() -> set[str]:
    """The services that serve the public HTTP API (the gateway), from their descriptors."""
    return {s.name for s in registry.services() if s.public_http}


def applying_services() -> set[str]:
    """The services whose processes apply projections (what `--replicas` replicates)."""
    return {s.name for s in registry.services() if s.projections}


def rpc_apart() -> set[str]:
    """The services whose RPC methods run in a process of their own (their descriptors)."""
    return {s.name for s in registry.services() if s.rpc_apart}


#: the name of a service's RPC process beside its own (`profile_renderer_rpc`)
RPC_PROCESS_SUFFIX = "_rpc"
#: the second and later replicas of a service's process: `producers-2`, ...
REPLICA_SUFFIX = "-"


def answers_reads(service: str, role: str) -> bool:
    """Whether a process of `service` in `role` answers anyone: the public HTTP API, or RPC
    methods. The others (the producers; a service's projection process when its RPC runs
    apart) only apply events, and run at HABITUS_BACKGROUND_NICE (habitus.runtime.priority)."""
    descriptor = registry.service(service)
    return descriptor.public_http or (bool(descriptor.rpc_prefixes) and role != "projections")


def service_names() -> list[str]:
    """Every installed service, the public one last (it checks the others are ready)."""
    names = [s.name for s in registry.services()]
    public = public_services()
    return [n for n in names if n not in public] + [n for n in names if n in public]


def dev_key(data_dir: Path) -> str:
    """A key for the local `dev` tenant, made once and kept with the data."""
    path = data_dir / "dev-api-key"
    if path.exists():
        return path.read_text().strip()
    key = generate_key()
    path.write_text(key + "\n")
    path.chmod(0o600)
    return key


def example_turn() -> dict[str, object]:
    now = round(time.time(), 3)
    return {
        "type": "TurnRecorded",
        "user_id": "alice",
        "payload": {
            "session_id": "s1", "turn_id": "t1", "channel": "cli",
            "user_message": "Shorter answers please, just code.",
            "assistant_message": "def add(a, b): return a + b",
            "user_at": now, "assistant_at": now + 2, "tool_calls": [],
        },
    }


def _say(text: str) -> None:
    print(text, flush=True)


def _ready(url: str) -> bool:
    try:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(url, timeout=2) as response:
            return bool(response.status == 200)
    except Exception:
        return False


class Up:
    def __init__(self, settings: Settings, guest: Guest | None = None,
                 preforked: Preforked | None = None, nats_cluster: bool = False,
                 replicas: int = 1):
        """`preforked`: the fork server's zygote, forked from this process before its event
        loop started (`habitus.runtime.forkserver.prefork`); without it, one is started.
        `nats_cluster`: an embedded NATS is a three-node cluster, its streams R3 (`up
        --nats-cluster`). `replicas`: processes of each service that applies projections
        (`<name>`, `<name>-2`, ...), sharing their partitions (`up --replicas`)."""
        self.replicas = replicas
        if nats_cluster and not settings.nats_url:
            settings = settings.model_copy(update={"stream_replicas": CLUSTER_REPLICAS})
        self.nats_cluster = nats_cluster
        self.settings = settings
        self.data_dir = settings.data_dir.resolve()
        #: what runs on the system once it is ready (the demo), if anything
        self.guest = guest
        #: whether the guest (when there is one) did all it should
        self.guest_ok = False
        self.embedded: list[EmbeddedServer] = []
        #: services are forked from a process that imported them once (it starts with `run`)
        self.forkserver = ForkServer(SERVICE_PRELOAD, self.data_dir / "logs" / "forkserver.log",
                                     on_start=self._record_forkserver, preforked=preforked)
        self.supervisor = Supervisor(on_spawn=self._record_service,
                                     launch=self.forkserver.launch)
        self.env: dict[str, str] = {}
        self.lock = InstanceLock(self.data_dir)
        # Servers are spawned (and restarted) only from this one thread: their parent-death
        # signal fires when the forking thread exits, so it must live as long as we do.
        self._infra = ThreadPoolExecutor(1, thread_name_prefix="habitus-infra")
        self._watchers: list[asyncio.Task[None]] = []
        self._state: dict[str, object] = {}
        self._state_lock = threading.Lock()
        self._owns_directory = False
        # Set by shutdown: a start still running in the infra thread starts no further server.
        self._stopping = threading.Event()

    # -- runtime.json --------------------------------------------------------------------------

    def _record(self, name: str, kind: str, ref: ProcessRef | None,
                stop_signal: int = signal.SIGTERM) -> None:
        """Note a child (with its start time and graceful stop signal) in runtime.json: a later
        start after a crash of ours stops exactly these processes, as gently as they allow."""
        with self._state_lock:
            children = dict(self._state.get("children") or {})  # type: ignore[call-overload]
            if ref is None:
                children.pop(name, None)
            else:
                children[name] = {"pid": ref.pid, "create_time": ref.create_time, "kind": kind,
                                  "stop_signal": int(stop_signal)}
            self._state["children"] = children
            write_runtime(self.data_dir, self._state)

    def _update_state(self, **values: object) -> None:
        with self._state_lock:
            self._state.update(values)
            write_runtime(self.data_dir, self._state)

    def _record_server(self, server: EmbeddedServer) -> None:
        self._record(server.name, "server", server.process_ref, server.stop_signal)

    def _record_forkserver(self, ref: ProcessRef | None) -> None:
        self._record("forkserver", "forkserver", ref)

    def _record_service(self, child: Supervised) -> None:
        if child.process is not None:
            self._record(child.spec.name, "service", ProcessRef.of(child.process.pid))

    # -- infrastructure ------------------------------------------------------------------------

    def start_infrastructure(self) -> dict[str, str]:
        s = self.settings
        self.data_dir.mkdir(parents=True, exist_ok=True)
        urls = {"nats": s.nats_url, "database": s.database_url, "redis": s.redis_url}
        makers: dict[str, Callable[[], EmbeddedServer]] = {
            "nats": lambda: EmbeddedNats(self.data_dir, die_with_owner=True),
            # pg_stat_statements loaded (not created): `make load` counts statements per schema
            "database": lambda: EmbeddedPostgres(
                self.data_dir, die_with_owner=True,
                extra_options={"shared_preload_libraries": "pg_stat_statements"}),
            "redis": lambda: EmbeddedRedis(self.data_dir, die_with_owner=True),
        }
        for key, url in urls.items():
            if url:
                _say(f"  {key:<9} {url} (configured)")
                continue
            if self._stopping.is_set():
                break
            if key == "nats" and self.nats_cluster:
                urls[key] = self._start_nats_cluster()
                continue
            server = makers[key]()
            self.embedded.append(server)
            urls[key] = server.start(timeout=60)
            server.pin_ports()  # a restart must come back where the clients reconnect
            self._record_server(server)
            _say(f"  {key:<9} {urls[key]} (embedded, data in {server.home})")
        return {k: v for k, v in urls.items() if v}

    def _start_nats_cluster(self) -> str:
        """Three routed nats-servers, each started, pinned, recorded and later watched like
        any embedded server (a killed node is restarted on its ports and store)."""
        cluster = EmbeddedNatsCluster(self.data_dir, die_with_owner=True)
        for node in cluster.nodes:
            self.embedded.append(node)
            node.start(timeout=60)
            node.pin_ports()
            self._record_server(node)
        cluster.wait_healthy(60)
        for node in cluster.nodes:
            _say(f"  {node.name:<9} {node.url} (embedded cluster node, data in {node.home})")
        return cluster.url

    def stop_infrastructure(self) -> None:
        for server in reversed(self.embedded):
            try:
                server.stop()
            except Exception:
                log.exception("stopping %s failed", server.name)
        self.embedded.clear()

    def _restart(self, server: EmbeddedServer) -> None:
        if not self._stopping.is_set():  # queued behind a shutdown: nothing to restart for
            server.start(timeout=60.0)

    async def _watch_server(self, server: EmbeddedServer) -> None:
        """Restart `server` whenever it dies, on its data and ports, with backoff."""
        loop = asyncio.get_running_loop()
        restarts = 0
        healthy_since = time.monotonic()
        while True:
            await asyncio.sleep(0.25)
            try:
                if server.is_running():
                    continue
                code = server.exit_code
                reason = f"it exited with {describe_exit(code)}" if code is not None else "gone"
                if time.monotonic() - healthy_since > STABLE_AFTER_SECONDS:
                    restarts = 0
                while True:
                    restarts += 1
                    delay = backoff_delay(restarts)
                    _say(f"  restarting {server.name} in {delay:.1f}s on port {server.port}: "
                         f"{reason} (log: {server.log_path})")
                    await asyncio.sleep(delay)
                    try:
                        await loop.run_in_executor(self._infra, self._restart, server)
                        break
                    except Exception as exc:
                        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                        reason = f"the last start failed: {first}"
                self._record_server(server)
                healthy_since = time.monotonic()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the watcher must outlive any surprise
                log.exception("watching %s failed", server.name)
                _say(f"  supervisor: watching {server.name} failed ({exc!r}); still watching")
                await asyncio.sleep(1.0)

    # -- the run -------------------------------------------------------------------------------

    def claim(self) -> list[str]:
        """Own the data directory: take its lock (AlreadyRunning if a live instance holds it),
        then stop what a crashed owner left running. Returns what was stopped."""
        self.lock.acquire()
        self._owns_directory = True
        cleaned = clean_leftovers(self.data_dir)
        with contextlib.suppress(FileNotFoundError):
            runtime_file(self.data_dir).unlink()
        return cleaned

    async def run(self, ready_timeout: float = 120.0, observe: bool = False) -> int:
        s = self.settings
        refused = self.guest.refusal(s) if self.guest is not None else None
        if refused is not None:
            _say(refused)
            return 1
        loop = asyncio.get_running_loop()
        _say("Habitus: starting")
        cleaned = await loop.run_in_executor(self._infra, self.claim)
        if cleaned:
            _say(f"  cleaned up after a run that did not stop: stopped {', '.join(cleaned)}")
        base_url = f"http://{s.http_host}:{s.http_port}"
        if port_in_use(s.http_host, s.http_port):
            _say(f"Habitus cannot start: port {s.http_port} on {s.http_host} is already in use "
                 "by another program (stop it, or set HABITUS_HTTP_PORT to a free port)")
            return 1
        # Its imports overlap the servers' start; the first service waits for what is left.
        self.forkserver.start()
        me = ProcessRef.of(os.getpid())
        self._update_state(pid=os.getpid(), create_time=me.create_time if me else None,
                           gateway=base_url, children={})
        # Blocking work (server start-up, migrations) runs off the event loop, so Ctrl-C is
        # handled at once even while Postgres initialises.
        urls = await loop.run_in_executor(self._infra, self.start_infrastructure)
        self._update_state(**{f"{k}_url": v for k, v in urls.items()})
        for server in self.embedded:
            self._watchers.append(asyncio.create_task(self._watch_server(server),
                                                      name=f"watch:{server.name}"))
        _say("  migrating")
        for result in await asyncio.to_thread(migrate, urls["database"]):
            _say(f"    {result.schema}: {result.before or 'empty'} -> {result.after}")
        nc = await connect(urls["nats"], "habitus-up")
        for r in await ensure_streams(nc.jetstream(), s):
            _say(f"    stream {r.name}: {r.action}")
        await nc.drain()

        key = dev_key(self.data_dir)
        names = service_names()
        public = public_services()
        others = [n for n in names if n not in public]
        bootstrap = ",".join(filter(None, [s.bootstrap_keys, f"{DEV_TENANT}:{key}"]))
        base_env = {
            **os.environ,
            "HABITUS_NATS_URL": urls["nats"],
            "HABITUS_DATABASE_URL": urls["database"],
            "HABITUS_REDIS_URL": urls["redis"],
            "HABITUS_DATA_DIR": str(self.data_dir),
            # every process reads the same key store (and KEK ring, unless HABITUS_KEK)
            "HABITUS_KEYSTORE_DIR": str(keystore_path(s)),
            "HABITUS_KEK_FILE": str(s.kek_file or keystore_path(s) / "kek.json"),
            "HABITUS_KEK": s.kek or "",
            "HABITUS_ENCRYPT_EVENTS": str(s.encrypt_events).lower(),
            # Spelled out rather than inherited: the demo's settings are not its environment's.
            "HABITUS_HTTP_HOST": s.http_host,
            "HABITUS_HTTP_PORT": str(s.http_port),
            "HABITUS_ADMIN_KEYS": s.admin_keys,
            "HABITUS_BOOTSTRAP_KEYS": bootstrap,
            "HABITUS_EXPECTED_SERVICES": ",".join(others),
            "HABITUS_PROFILE_MIRROR": os.environ.get("HABITUS_PROFILE_MIRROR", "true"),
            # every service ensures the streams as `up` did: R3 on the cluster
            "HABITUS_STREAM_REPLICAS": str(s.stream_replicas),
            "HABITUS_PARTITIONS": str(s.partitions),
        }
        if self.guest is not None:
            # Only these services get what the guest adds (the demo: its scripted model's URL,
            # which answers for the demo's system alone).
            base_env.update(self.guest.service_env())
        logs = self.data_dir / "logs"
        metrics: dict[str, str] = {}  # service -> host:port of its /metrics
        apart = rpc_apart()
        appliers = applying_services()
        for name in names:
            roles = ([(name, "projections"), (name + RPC_PROCESS_SUFFIX, "rpc")]
                     if name in apart else [(name, "all")])
            if name in appliers and self.replicas > 1:
                # the processes applying projections are replicated; an RPC one stays one
                roles = [(f"{process}{REPLICA_SUFFIX}{i}" if i > 1 else process, role)
                         for process, role in roles for i in range(1, (
                             self.replicas if role != "rpc" else 1) + 1)]
            for process, role in roles:
                env = dict(base_env)
                env["HABITUS_MEMBER"] = process  # its name among the service's replicas
                # spelled out for every process: one exported in the shell is not its own
                env["HABITUS_CPU_NICE"] = "0" if answers_reads(name, role) else str(
                    s.background_nice)
                if name not in public:
                    env["HABITUS_METRICS_PORT"] = str(free_port())
                    metrics[process] = f"{s.http_host}:{env['HABITUS_METRICS_PORT']}"
                # The role in the command line, so `ps` tells the two processes apart.
                self.supervisor.add(ProcessSpec(
                    process, [sys.executable, "-m", "habitus.cli", "serve", name,
                              *(["--role", role] if role != "all" else [])], env,
                    logs / f"{process}.log"))
        split = [f"{n}'s RPC in {n}{RPC_PROCESS_SUFFIX}" for n in names if n in apart]
        _say(f"  services: {', '.join(names)}" + (f"; {', '.join(split)}" if split else "")
             + f" (logs in {logs})")
        if self.replicas > 1:
            _say(f"  replicas: {self.replicas} of each of {', '.join(sorted(appliers))} "
                 f"(`habitus partitions` shows who applies what)")
        self._update_state(metrics={**metrics, **{n: f"{s.http_host}:{s.http_port}"
                                                  for n in public}})
        prometheus_url = self._observe(metrics, base_env) if observe else None
        deadline = time.monotonic() + ready_timeout
        while not await asyncio.to_thread(_ready, f"{base_url}/readyz"):
            if time.monotonic() > deadline:
                _say(f"Habitus did not become ready in {ready_timeout:.0f}s; see {logs}")
                return 1
            await asyncio.sleep(0.3)
        _say("")
        _say(f"  gateway   {base_url}   (OpenAPI: {base_url}/docs)")
        _say(f"  API key   {key}   (tenant '{DEV_TENANT}', tenant-admin)")
        _say(f"  try       curl -s -X POST {base_url}/v1/events "
             f"-H 'Authorization: Bearer {key}' -H 'Content-Type: application/json' "
             f"-d '{json.dumps([example_turn()])}'")
        if prometheus_url:
            _say(f"  prometheus {prometheus_url}   (data in {self.data_dir / 'prometheus'})")
        _say("")
        _say(f"Habitus is ready at {base_url} (Ctrl-C to stop)")
        if self.guest is not None:
            system = System(base_url, key, urls["nats"], urls["database"], self.data_dir)
            self.guest_ok = await asyncio.to_thread(self.guest.run, system)
        return 0

    def _observe(self, metrics: dict[str, str], env: dict[str, str]) -> str | None:
        """Start the supervised Prometheus of `--observe`; its URL, or None (said why)."""
        from habitus.runtime.observe import PrometheusMissing, prometheus_spec

        # Labelled like compose and Kubernetes do: by deploy name (stability-detector).
        deploy = {d.name: d.deploy_name for d in registry.services()}
        deploy.update({n + RPC_PROCESS_SUFFIX: f"{deploy[n]}-rpc" for n in rpc_apart()})
        s = self.settings
        try:
            spec, url = prometheus_spec(
                self.data_dir, s.http_host, f"{s.http_host}:{s.http_port}",
                {deploy.get(n, n): target for n, target in metrics.items()}, env)
        except PrometheusMissing as exc:
            _say(f"  prometheus not started: {exc}")
            return None
        self.supervisor.add(spec)
        self._update_state(prometheus_url=url)
        return url

    async def shutdown(self) -> None:
        """Stop services, then servers, then let go of the directory; each step runs even if
        an earlier one failed, so no server is left orphaned by a bug in the one before."""
        if not self._owns_directory:  # a refused start touches nothing of the live instance
            await self.forkserver.stop()
            self._infra.shutdown(wait=True)
            return
        _say("Habitus: stopping")
        self._stopping.set()
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(stop_task(task) for task in self._watchers))
        try:
            await self.supervisor.stop()
        except Exception:
            log.exception("stopping the services failed")
        try:
            await self.forkserver.stop()
        except Exception:
            log.exception("stopping the fork server failed")
        if self.guest is not None:
            self.guest.stop()
        try:
            await loop.run_in_executor(self._infra, self.stop_infrastructure)
        finally:
            self._infra.shutdown(wait=True)
            with contextlib.suppress(FileNotFoundError):
                runtime_file(self.data_dir).unlink()
            self.lock.release()
            self._owns_directory = False
        _say("Habitus: stopped")


async def up(settings: Settings, guest: Guest | None = None, keep: bool = True,
             observe: bool = False, preforked: Preforked | None = None,
             nats_cluster: bool = False, replicas: int = 1) -> int:
    """Run until Ctrl-C/SIGTERM; with a `guest`, run it once ready, and unless `keep`, stop
    everything after it (exit 1 if it did not do all it should). `preforked`, `nats_cluster`,
    `replicas`: see `Up`."""
    runner = Up(settings, guest, preforked, nats_cluster, replicas)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        start = asyncio.create_task(runner.run(observe=observe))
        stopper = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait({start, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if start in done:
            try:
                code = start.result()
            except AlreadyRunning as exc:
                print(str(exc), file=sys.stderr, flush=True)
                return 1
            except EmbeddedServerError as exc:  # its message carries the server's log tail
                print(f"Habitus could not start: {exc}", file=sys.stderr, flush=True)
                return 1
            if code != 0:
                return code
            if guest is not None and not keep:
                return 0 if runner.guest_ok else 1
            await stop.wait()
        else:
            start.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await start
        return 0
    finally:
        await runner.shutdown()
