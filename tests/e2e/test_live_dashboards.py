"""Every dashboard panel and every alert against a real Prometheus scraping a real Habitus.

`habitus demo --keep`, in its sandbox (a fresh data directory, free ports), replays the bundled
scenario (examples/scenarios/three_weeks.py, the scripted model answering the LLM parts)
through the gateway and keeps running; a Prometheus on a free port, with the config
`habitus up --observe` generates (habitus.runtime.observe) for the ports the sandbox's
runtime.json lists, scrapes every process each second. Then every query of every panel of
every dashboard (Grafana variables substituted) must return data, every alert expression must
evaluate, and every metric a dashboard names must be in some service's /metrics
(tests/support/dashboards.py).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from habitus.runtime.embedded import free_port
from habitus.runtime.observe import prometheus_argv, scrape_config
from tests.support import dashboards, prometheus
from tests.support.http import TLS

pytestmark = [pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
DONE_MARK = "demo: every expectation"


def metrics_texts(targets: list[str]) -> list[str]:
    with httpx.Client(timeout=10, trust_env=False, verify=TLS) as client:
        return [client.get(f"http://{t}/metrics").text for t in targets]


def wait_for_line(proc: subprocess.Popen[str], marks: tuple[str, ...], lines: list[str],
                  timeout: float) -> str:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError("habitus demo exited early:\n" + "".join(lines))
        lines.append(line)
        for mark in marks:
            if mark in line:
                return mark
    raise AssertionError(f"none of {marks} in time:\n" + "".join(lines))


@pytest.fixture
def data_root() -> Iterator[Path]:
    # Outside pytest's tmp root (see tests/e2e/test_habitus_up.py: Postgres as root).
    root = Path(tempfile.mkdtemp(prefix="habitus-live-"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


def test_every_panel_has_data_and_every_alert_evaluates(data_root: Path) -> None:
    binaries = prometheus.require()
    queries = dashboards.dashboard_queries()
    assert queries, "no dashboard queries found"
    alerts = dashboards.alert_exprs()
    started = time.monotonic()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HABITUS_")}
    env["TMPDIR"] = str(data_root)  # the demo's sandbox, kept (--keep), goes with the fixture
    demo = subprocess.Popen(
        [sys.executable, "-m", "habitus.cli", "demo", "--keep"], cwd=REPO, env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    prom: subprocess.Popen[bytes] | None = None
    lines: list[str] = []
    try:
        wait_for_line(demo, ("Habitus is ready at",), lines, timeout=120)
        key = next(line.split()[2] for line in lines if line.strip().startswith("API key"))
        data_dir = Path(next(line.split(", ", 1)[1].strip() for line in lines
                             if line.startswith("Habitus demo: in a sandbox of its own, ")))
        runtime = json.loads((data_dir / "runtime.json").read_text())
        targets: dict[str, str] = runtime["metrics"]
        gateway = targets.pop("gateway")
        prom_port = free_port()
        config = scrape_config(gateway, targets, scrape_interval="1s",
                               rule_files=[dashboards.ALERTS])
        home = data_root / "prometheus"
        home.mkdir()
        (home / "prometheus.yml").write_text(json.dumps(config))
        prom_log = open(home / "log", "wb")  # the child keeps its own descriptor
        prom = subprocess.Popen(
            prometheus_argv(binaries.prometheus, home / "prometheus.yml", home / "data",
                            f"127.0.0.1:{prom_port}"),
            stdout=prom_log, stderr=subprocess.STDOUT, start_new_session=True)
        prom_log.close()
        wait_for_line(demo, (DONE_MARK, "expectation(s) not met"), lines, timeout=150)
        # One refused item, so the rejection panels have something to show.
        refused = httpx.post(f"http://{gateway}/v1/events", json=[{"type": "NoSuchEvent"}],
                             headers={"Authorization": f"Bearer {key}"}, timeout=10,
                             trust_env=False, verify=TLS)
        assert refused.status_code < 500, refused.text
        url = f"http://127.0.0.1:{prom_port}"
        expected = len(targets) + 1
        with httpx.Client(base_url=url, timeout=10, trust_env=False, verify=TLS) as client:
            deadline = time.monotonic() + 30
            while True:
                try:
                    got = client.get("/api/v1/query", params={"query": "sum(up)"}).json()
                    up = float(got["data"]["result"][0]["value"][1]) if got["data"][
                        "result"] else 0.0
                except (httpx.HTTPError, ValueError, KeyError):
                    up = 0.0
                if up >= expected:
                    break
                assert time.monotonic() < deadline, (
                    f"Prometheus scrapes {up:.0f} of {expected} targets:\n"
                    + (home / "log").read_text(errors="replace")[-2000:])
                time.sleep(0.5)
        time.sleep(4)  # a few scrapes after the replay: rates have two samples either side
        exposition = dashboards.Exposition.parse(metrics_texts([gateway, *targets.values()]))
        result = dashboards.check(url, exposition, queries, alerts)
    finally:
        if prom is not None:
            prom.send_signal(signal.SIGTERM)
            try:
                prom.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(prom.pid, signal.SIGKILL)
        demo.send_signal(signal.SIGINT)
        try:
            demo.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(demo.pid, signal.SIGKILL)
    elapsed = time.monotonic() - started
    print(f"\nlive check: {len(queries)} panel queries, {len(alerts)} alerts, "
          f"{result.checked} queries run in {elapsed:.0f} s")
    assert result.problems == [], "\n".join(result.problems)
