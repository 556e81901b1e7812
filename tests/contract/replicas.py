"""Replicas of a scoped projection as processes of their own, to be SIGKILLed.

`python -m tests.contract.replicas` is a small zygote: it imports the services and the contract
harness once, then forks a replica per request (a JSON line on stdin; it answers the child's
pid), so each contract case gets a real process in milliseconds rather than a second of
imports. It runs no event loop and no threads of its own, so forking it is safe; its children
are reaped as they die (SIGCHLD ignored), and it exits when its stdin closes.

A replica builds the projection as the contract does (`harness.instantiate`, then `scope` under
the name and tenants it is given), joins the partitions' membership like a service's process
and applies its share. With `stall_after`, after that many batches it writes its marker file
and then hangs inside the next batch's transaction, which is where the test kills it: mid-run,
mid-batch, nothing of that batch committed or acknowledged. With `gate` (a benchmark's), it
loads what its first batch would (`warm`), writes `ready` to its marker and joins only once the
gate file exists, so replicas start together and their start-up is not measured.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from habitus.bus import connect
from habitus.config import Settings
from habitus.crypto.setup import keyring_from
from habitus.db.pool import open_pool
from habitus.events import install_keyring
from habitus.projection import ApplyContext, Delivered, Projection
from habitus.service.membership import Membership
from habitus.service.registry import services
from tests.contract.harness import FAST, instantiate, scope
from tests.support.example_service import main as example

REPO = Path(__file__).resolve().parents[2]


def projection_class(name: str) -> Any:
    for descriptor in services(extra=[example.service]):
        for cls in descriptor.running_projections():
            if cls.name == name:
                return cls
    raise LookupError(name)


async def replica(spec: dict[str, Any]) -> None:
    projection = scope(instantiate(projection_class(spec["projection"])), spec["tenants"])
    projection.name = spec["name"]  # type: ignore[misc]  # the test's scoped name
    applied = 0
    cls = type(projection)

    async def counting(self: Projection, cur: Any, batch: Sequence[Delivered],
                       ctx: ApplyContext) -> None:
        nonlocal applied
        if spec.get("stall_after") is not None and applied >= spec["stall_after"]:
            await asyncio.to_thread(Path(spec["marker"]).write_text, "stalled")
            await asyncio.Event().wait()  # inside the batch's transaction, until killed
        await cls.apply_batch(self, cur, batch, ctx)
        applied += 1

    # on a subclass, so each partition's clone counts (and applies) as itself
    projection.__class__ = type(f"Stalling{cls.__name__}", (cls,),
                                {"apply_batch": counting, "__module__": __name__})
    # the replica opens users' sealed payloads with the test's key store, as a service would
    install_keyring(keyring_from(Settings(keystore_dir=Path(spec["keystore_dir"]))))
    nc = await connect(spec["nats_url"], f"replica-{os.getpid()}")
    pool = await open_pool(spec["database_url"], min_size=1, max_size=4, name="replica")
    config = replace(FAST, batch_size=spec.get("batch_size", 2))
    member = Membership("contract", projection.schema, [projection], nc, pool,
                        partitions=spec["partitions"], lease_seconds=spec["lease"],
                        member=spec["member"], runner_config=config)
    if spec.get("gate"):
        reader = getattr(projection, "reader", None)  # the producers' statement reader
        if reader is not None:
            await asyncio.to_thread(reader.warm)
        await asyncio.to_thread(Path(spec["marker"]).write_text, "ready")
        while not await asyncio.to_thread(Path(spec["gate"]).exists):  # noqa: ASYNC110
            await asyncio.sleep(0.01)
    await member.start()
    await asyncio.Event().wait()


def serve() -> None:
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped as they die
    for line in sys.stdin:
        spec = json.loads(line)
        pid = os.fork()
        if pid == 0:
            os.setsid()
            log = os.open(spec["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            os.dup2(log, 1)
            os.dup2(log, 2)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            try:
                asyncio.run(replica(spec))
            finally:
                os._exit(1)
        print(json.dumps({"pid": pid}), flush=True)


class Zygote:
    """The test's side: start the zygote, ask it for replicas."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.contract.replicas"],
                                     cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)

    def spawn(self, **spec: Any) -> int:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(spec) + "\n")
        self.proc.stdin.flush()
        return int(json.loads(self.proc.stdout.readline())["pid"])

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(10)


if __name__ == "__main__":
    serve()
