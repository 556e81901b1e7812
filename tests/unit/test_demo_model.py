"""What the demo's `habitus up` adds to its own services' environment."""

from __future__ import annotations

import pytest

from habitus.demo.model import scripted_model_for_demo


@pytest.mark.parametrize("given", [None, "2"])
def test_the_demos_producers_read_in_a_thread_unless_told_otherwise(
        monkeypatch: pytest.MonkeyPatch, given: str | None) -> None:
    """A reader process of its own costs the demo two seconds of a core before the producers
    are ready and buys nothing for a hundred items; a setting of the user's own stands."""
    monkeypatch.delenv("HABITUS_LLM_BASE_URL", raising=False)
    monkeypatch.delenv("HABITUS_LLM_MODEL", raising=False)
    if given is None:
        monkeypatch.delenv("HABITUS_PRODUCERS_READER_PROCESSES", raising=False)
    else:
        monkeypatch.setenv("HABITUS_PRODUCERS_READER_PROCESSES", given)
    server, env = scripted_model_for_demo()
    try:
        assert env.get("HABITUS_PRODUCERS_READER_PROCESSES") == (None if given else "0")
        assert env["HABITUS_EXTRACTOR_WINDOW_SECONDS"] == "3"
        assert server is not None and env["HABITUS_LLM_BASE_URL"] == server.url
    finally:
        if server is not None:
            server.stop()
