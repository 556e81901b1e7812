"""The gateway call every HTTP subcommand of `habitus` makes (rules, facets, profile, habits,
route, traces, extractor): the same door, checks and answers an agent gets.

The gateway comes from `--url`, `HABITUS_URL` (or the older `HABITUS_GATEWAY_URL`), the running
`habitus up` on the same data directory, or `http://127.0.0.1:<HABITUS_HTTP_PORT>`; the key from
`--key` (`--api-key`; only that in `habitus facets`, whose `--key` is a facet's),
`HABITUS_API_KEY`, or the local `dev` key a `habitus up` writes.

Errors are one line and an exit code, never a traceback: the gateway unreachable (exit 2, with
how to start it), a refused request (4xx: exit 2, the gateway's message, which names the field),
a failure of the gateway or a service behind it (5xx: exit 1).
"""

from __future__ import annotations

import os
from typing import Annotated, Any

import httpx
import typer
from rich.console import Console
from rich.markup import escape

from habitus.config import get_settings

console = Console()

Url = Annotated[str | None, typer.Option(
    "--url", help="the gateway (default: HABITUS_URL, or the running `habitus up`)")]
Key = Annotated[str | None, typer.Option(
    "--key", "--api-key", help="an API key (default: HABITUS_API_KEY or the local dev key)")]
#: for commands whose `--key` is something else (a facet's key)
ApiKey = Annotated[str | None, typer.Option(
    "--api-key", help="an API key (default: HABITUS_API_KEY or the local dev key)")]

#: exit code of a usage error: a refused request, no gateway, no key
USAGE = 2
#: exit code of a failure behind the gateway (5xx)
FAILED = 1


def fail(message: str, code: int = USAGE) -> typer.Exit:
    """Print `message` in red (as text, not markup) and return the Exit to raise."""
    console.print(f"[red]{escape(message)}[/]", soft_wrap=True, highlight=False)
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


def call(method: str, params: dict[str, Any], url: str | None = None,
         key: str | None = None, *, timeout: float = 30.0) -> Any:
    """POST /v1/rpc/<method> and return its result; on an error print one line and exit."""
    base, secret = gateway_url(url), api_key(key)
    try:
        response = httpx.post(f"{base}/v1/rpc/{method}", json=params, timeout=timeout,
                              headers={"Authorization": f"Bearer {secret}"})
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
