"""`habitus demo`: `habitus up` in a fresh sandbox of its own, with the demo as its guest.

The runtime (`habitus.runtime.up`) runs any `Guest` it is given and knows nothing of the demo;
`DemoGuest` is the demo's side of that: it refuses every system but a sandbox (its tenants and
its scripted model's invented answers must never reach a system the demo did not make), gives
the sandbox's services the scripted model (`habitus.demo.model`), runs `run_demo` once the
gateway is ready, and stops the model at the end. `demo` makes the sandbox, runs `up` on it
and removes it afterwards unless `--keep`.
"""

from __future__ import annotations

import asyncio

from habitus.config import Settings
from habitus.demo.model import scripted_model_for_demo
from habitus.demo.run import run_demo
from habitus.demo.sandbox import MARKER, create, is_sandbox, remove
from habitus.demo.scripted_llm import ScriptedLlmServer
from habitus.runtime.forkserver import Preforked
from habitus.runtime.up import System, up


def _say(text: str) -> None:
    print(text, flush=True)


class DemoGuest:
    """The demo, as what `habitus up` runs on the system it started (`habitus.runtime.up.Guest`).

    `keep`: the system stays up afterwards (until Ctrl-C), and the demo prints what to try."""

    def __init__(self, keep: bool = False) -> None:
        self.keep = keep
        #: the scenario's scripted model (a local server), when the demo started one
        self._model: ScriptedLlmServer | None = None

    def refusal(self, settings: Settings) -> str | None:
        # Only `demo()`'s sandbox (marked, no server configured) will do.
        if is_sandbox(settings):
            return None
        return (f"Habitus: the demo runs only in a sandbox of its own (a directory with a "
                f"{MARKER} file and no HABITUS_*_URL), not on {settings.data_dir.resolve()}: "
                "use `habitus demo`")

    def service_env(self) -> dict[str, str]:
        # the scenario's scripted model, unless HABITUS_LLM_* names a real one
        self._model, env = scripted_model_for_demo()
        return env

    def run(self, system: System) -> bool:
        return run_demo(system.base_url, system.key, nats_url=system.nats_url,
                        database_url=system.database_url, keep=self.keep,
                        data_dir=system.data_dir)

    def stop(self) -> None:
        if self._model is not None:
            self._model.stop()
            self._model = None


async def demo(base: Settings, keep: bool = False, preforked: Preforked | None = None) -> int:
    """`habitus demo`: `up` with the demo as its guest in a fresh sandbox, which is removed
    afterwards unless `keep` (then the system runs until Ctrl-C and its data stays, and the demo
    says where)."""
    sandbox = create(base)
    _say(f"Habitus demo: in a sandbox of its own, {sandbox.data_dir}")
    _say("  its own embedded NATS, Postgres and Redis and its own gateway, on free ports; "
         + ("kept after it stops (--keep)" if keep else "removed when the demo ends"))
    if sandbox.ignored:
        _say(f"  not used by the demo (they name your own system): {', '.join(sandbox.ignored)}")
    try:
        return await up(sandbox.settings, guest=DemoGuest(keep), keep=keep, preforked=preforked)
    finally:
        if keep:
            _say(f"Habitus demo: its data stays in {sandbox.data_dir} "
                 f"(rm -rf {sandbox.data_dir} when done)")
        else:
            problem = await asyncio.to_thread(remove, sandbox.data_dir)
            _say(f"Habitus demo: {problem}" if problem else
                 f"Habitus demo: removed its sandbox {sandbox.data_dir}")
