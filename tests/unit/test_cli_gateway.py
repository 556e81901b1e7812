"""Where the gateway CLI commands send their calls, and the one-line errors they print."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer

from habitus.cli import gateway as cli_gateway
from habitus.cli.gateway import api_key, call, error_line, gateway_url
from habitus.config import get_settings


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    for name in ("HABITUS_URL", "HABITUS_GATEWAY_URL", "HABITUS_API_KEY", "HABITUS_HTTP_PORT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HABITUS_DATA_DIR", str(tmp_path))
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def test_the_url_comes_from_the_flag_then_habitus_url_then_the_old_name(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert gateway_url() == "http://127.0.0.1:8080"
    monkeypatch.setenv("HABITUS_GATEWAY_URL", "http://old:1/")
    assert gateway_url() == "http://old:1"
    monkeypatch.setenv("HABITUS_URL", "http://new:2/")
    assert gateway_url() == "http://new:2"
    assert gateway_url("http://flag:3") == "http://flag:3"


def test_the_running_habitus_up_is_the_fallback(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    monkeypatch.setattr("habitus.runtime.state.read_runtime",
                        lambda data_dir: {"gateway": "http://127.0.0.1:9999"})
    assert gateway_url() == "http://127.0.0.1:9999"
    (tmp_path / "dev-api-key").write_text("hab_dev\n")
    assert api_key() == "hab_dev"
    monkeypatch.setenv("HABITUS_API_KEY", "hab_env")
    assert api_key() == "hab_env"
    assert api_key("hab_flag") == "hab_flag"


def test_no_key_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(typer.Exit) as exit_:
        api_key()
    assert exit_.value.exit_code == 2
    assert "HABITUS_API_KEY" in capsys.readouterr().out


def test_error_lines() -> None:
    body = {"error": {"code": "invalid_argument", "message": "user_id: not a valid id [x]"}}
    assert error_line(400, body, "") == "400 invalid_argument: user_id: not a valid id [x]"
    assert error_line(502, None, "<html>bad gateway</html>") == "502: <html>bad gateway</html>"
    assert error_line(500, None, "") == "500: no body"


def on_transport(monkeypatch: pytest.MonkeyPatch,
                 handle: Callable[[httpx.Request], httpx.Response]) -> None:
    """The CLI's HTTP client, on httpx's mock transport: requests are built and sent as they
    would be to a gateway, and `handle` answers them."""
    client = httpx.Client(transport=httpx.MockTransport(handle))
    monkeypatch.setattr(cli_gateway, "http", lambda: client)


def answering(monkeypatch: pytest.MonkeyPatch, status: int, body: Any) -> list[httpx.Request]:
    sent: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(status, content=json.dumps(body).encode(),
                              headers={"content-type": "application/json"})

    on_transport(monkeypatch, handle)
    return sent


def test_a_call_posts_the_params_with_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    sent = answering(monkeypatch, 200, {"result": {"ok": True}})
    assert call("x.y", {"a": 1}, "http://gw", "hab_k") == {"ok": True}
    [request] = sent
    assert str(request.url) == "http://gw/v1/rpc/x.y" and json.loads(request.content) == {"a": 1}
    assert request.headers["Authorization"] == "Bearer hab_k"
    assert "X-Habitus-Tenant" not in request.headers


def test_one_client_serves_every_call_of_a_process() -> None:
    # A command's calls (an answer, then the probe that explains it) share its connection
    # and its TLS context: making a client costs about 20 ms of CPU before it sends a byte.
    assert cli_gateway.http() is cli_gateway.http()


@pytest.mark.parametrize(("status", "code"), [(400, 2), (404, 2), (409, 2), (500, 1), (503, 1)])
def test_a_refusal_is_one_line_and_an_exit_code(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str],
                                                status: int, code: int) -> None:
    answering(monkeypatch, status, {"error": {"code": "c", "message": "field: [bad]"}})
    with pytest.raises(typer.Exit) as exit_:
        call("x.y", {}, "http://gw", "hab_k")
    assert exit_.value.exit_code == code
    assert capsys.readouterr().out.strip() == f"x.y: {status} c: field: [bad]"


def test_an_unreachable_gateway_says_how_to_start_one(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused")

    on_transport(monkeypatch, refuse)
    with pytest.raises(typer.Exit) as exit_:
        call("x.y", {}, "http://gw:1", "hab_k")
    assert exit_.value.exit_code == 2
    out = capsys.readouterr().out
    assert "cannot reach the gateway at http://gw:1 ([Errno 111] Connection refused)" in out
    assert "habitus up" in out and "HABITUS_URL" in out
