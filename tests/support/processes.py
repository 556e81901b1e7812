"""Running a service as its own OS process, as `habitus up` and containers do."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from habitus.runtime.embedded import free_port
from tests.support.http import TLS

REPO = Path(__file__).resolve().parents[2]


@contextmanager
def serve(service: str, env: dict[str, str], timeout: float = 60.0) -> Iterator[str]:
    """`habitus serve <service>` in a child process; yields its base URL once /healthz answers."""
    port = free_port()
    child_env = {**os.environ, **env, "HABITUS_HTTP_PORT": str(port),
                 "HABITUS_METRICS_PORT": str(port)}
    proc = subprocess.Popen([sys.executable, "-m", "habitus.cli", "serve", service], cwd=REPO,
                            env=child_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                err = proc.stderr.read().decode() if proc.stderr else ""
                raise RuntimeError(f"{service} exited with {proc.returncode}:\n{err[-3000:]}")
            try:
                if httpx.get(f"{url}/healthz", timeout=1, verify=TLS).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"{service} did not answer /healthz in {timeout}s")
            time.sleep(0.1)
        yield url
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
