"""The gateway call every HTTP subcommand of `habitus` makes (context, facets, profile, habits,
rules, route, traces, extractor): the same door, checks and answers an agent gets.

Every one of them takes the same three flags, so an operator learns them once:

* `--url`: the gateway; else `HABITUS_URL` (or the older `HABITUS_GATEWAY_URL`), the running
  `habitus up` on the same data directory, or `http://127.0.0.1:<HABITUS_HTTP_PORT>`.
* `--key`: the API key; else `HABITUS_API_KEY`, or the local `dev` key a `habitus up` writes.
  (`--api-key`, its older spelling, still works: `habitus.cli` maps it to `--key`.)
* `--tenant`: the tenant an admin key acts for (sent as `X-Habitus-Tenant`); a tenant's own key
  acts for its tenant and needs none.

Errors are one line and an exit code, never a traceback: the gateway unreachable (exit 2, with
how to start it), a refused request (4xx: exit 2, the gateway's message, which names the field),
a failure of the gateway or a service behind it (5xx: exit 1).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cache
from typing import Annotated, Any

import httpx
import typer

from habitus.cli.output import console
from habitus.config import get_settings

#: the header an admin key names the tenant it acts for with (see services/gateway/auth.py)
TENANT_HEADER = "X-Habitus-Tenant"

Url = Annotated[str | None, typer.Option(
    "--url", help="the gateway (default: HABITUS_URL, or the running `habitus up`)")]
Key = Annotated[str | None, typer.Option(
    "--key", help="an API key (default: HABITUS_API_KEY or the local dev key)")]
Tenant = Annotated[str | None, typer.Option(
    "--tenant", help="the tenant an admin key acts for (X-Habitus-Tenant); a tenant's own key "
                     "needs none")]

#: exit code of a usage error: a refused request, no gateway, no key
USAGE = 2
#: exit code of a failure behind the gateway (5xx)
FAILED = 1


def fail(message: str, code: int = USAGE) -> typer.Exit:
    """Print `message` in red (as text, not markup) and return the Exit to raise."""
    console.print(message, style="red", soft_wrap=True)
    return typer.Exit(code)


def gateway_url(url: str | None = None) -> str:
    """Where the gateway is: --url, HABITUS_URL, HABITUS_GATEWAY_URL, the running `habitus up`,
    or the default port on this machine."""
    given = url or os.environ.get("HABITUS_URL") or os.environ.get("HABITUS_GATEWAY_URL")
    if given:
        return given.rstrip("/")
    from habitus.runtime.state import read_runtime

    settings = get_settings()
    doc = read_runtime(settings.data_dir.resolve()) or {}
    running = doc.get("gateway")
    if isinstance(running, str) and running.startswith("http"):
        return running.rstrip("/")
    return f"http://127.0.0.1:{settings.http_port}"


def api_key(key: str | None = None) -> str:
    """The API key: --key, HABITUS_API_KEY, or the dev key of a local `habitus up`."""
    given = key or os.environ.get("HABITUS_API_KEY")
    if given:
        return given
    local = get_settings().data_dir.resolve() / "dev-api-key"
    if local.exists():
        return local.read_text().strip()
    raise fail("no API key: pass --key or set HABITUS_API_KEY (`habitus keys create "
               "--tenant T` makes one)")


def error_line(status: int, body: Any, text: str) -> str:
    """`400 invalid_argument: user_id: ...` from the gateway's `{"error": {code, message}}`."""
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        return f"{status} {error.get('code', '')}: {error.get('message', '')}".rstrip(": ")
    return f"{status}: {text.strip()[:500] or 'no body'}"


def headers(key: str | None = None, tenant: str | None = None) -> dict[str, str]:
    """The bearer key, and the tenant an admin key acts for."""
    sent = {"Authorization": f"Bearer {api_key(key)}"}
    if tenant:
        sent[TENANT_HEADER] = tenant
    return sent


@cache
def http() -> httpx.Client:
    """The process's one client for the gateway: a command may make several calls (an answer,
    then a probe that explains it; a list page by page), and each new client builds a TLS
    context, about 20 ms of CPU, before it sends a byte."""
    return httpx.Client()


def call(method: str, params: dict[str, Any], url: str | None = None,
         key: str | None = None, *, tenant: str | None = None, timeout: float = 30.0) -> Any:
    """POST /v1/rpc/<method> and return its result; on an error print one line and exit."""
    base, sent = gateway_url(url), headers(key, tenant)
    try:
        response = http().post(f"{base}/v1/rpc/{method}", json=params, timeout=timeout,
                               headers=sent)
    except httpx.TimeoutException:
        raise fail(f"the gateway at {base} did not answer {method} within {timeout:g}s",
                   FAILED) from None
    except httpx.HTTPError as exc:
        raise fail(f"cannot reach the gateway at {base} ({exc}): is Habitus running? Start it "
                   "with `habitus up`, or point --url / HABITUS_URL at a running gateway."
                   ) from None
    try:
        body = response.json()
    except ValueError:
        body = None
    if response.status_code != 200 or not isinstance(body, dict) or "result" not in body:
        raise fail(f"{method}: {error_line(response.status_code, body, response.text)}",
                   USAGE if 400 <= response.status_code < 500 else FAILED)
    return body["result"]


def probe(method: str, params: dict[str, Any], url: str | None = None,
          key: str | None = None, *, tenant: str | None = None, timeout: float = 10.0
          ) -> Any | None:
    """The result of a call made only to explain another answer (why a list is empty), or None
    when the gateway or the service behind it fails: the explanation is optional and the answer
    was already given, so a failure here prints nothing and never changes the exit code. (It
    follows a call that succeeded, so the gateway and the key are known.)"""
    try:
        response = http().post(f"{gateway_url(url)}/v1/rpc/{method}", json=params,
                               timeout=timeout, headers=headers(key, tenant))
        body = response.json()
    except (httpx.HTTPError, ValueError):
        return None
    if response.status_code != 200 or not isinstance(body, dict):
        return None
    return body.get("result")


@dataclass(frozen=True)
class Gateway:
    """The gateway a command talks to, as its `--url`, `--key` and `--tenant` name it."""

    url: str | None = None
    key: str | None = None
    tenant: str | None = None

    def call(self, method: str, params: dict[str, Any], *, timeout: float = 30.0) -> Any:
        return call(method, params, self.url, self.key, tenant=self.tenant, timeout=timeout)

    def probe(self, method: str, params: dict[str, Any]) -> Any | None:
        return probe(method, params, self.url, self.key, tenant=self.tenant)
