"""LLM settings: unset means off (with the reason said), blank variables count as unset."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from habitus.llm import LlmSettings


@pytest.fixture(autouse=True)
def _no_llm_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("BASE_URL", "MODEL", "API_KEY", "STRUCTURED_OUTPUT", "MAX_RETRIES"):
        monkeypatch.delenv(f"HABITUS_LLM_{name}", raising=False)


def test_off_by_default_and_says_why() -> None:
    s = LlmSettings()
    assert not s.enabled
    assert s.disabled_reason() == "HABITUS_LLM_BASE_URL is unset"


def test_a_base_url_without_a_model_is_still_off() -> None:
    s = LlmSettings(base_url="http://127.0.0.1:1/v1")
    assert not s.enabled
    assert s.disabled_reason() == "HABITUS_LLM_MODEL is unset"


def test_on_with_both_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HABITUS_LLM_BASE_URL", "http://llm:8000/v1")
    monkeypatch.setenv("HABITUS_LLM_MODEL", "small")
    monkeypatch.setenv("HABITUS_LLM_STRUCTURED_OUTPUT", "fenced")
    s = LlmSettings()
    assert s.enabled
    assert s.disabled_reason() is None
    assert s.structured_output == "fenced"


def test_blank_variables_are_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HABITUS_LLM_BASE_URL", "  ")
    monkeypatch.setenv("HABITUS_LLM_MODEL", "")
    s = LlmSettings()
    assert s.base_url is None and s.model is None and not s.enabled


def test_settings_are_frozen_and_checked() -> None:
    s = LlmSettings()
    with pytest.raises(ValidationError):
        s.model = "other"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        LlmSettings.model_validate({"structured_output": "xml"})
    with pytest.raises(ValidationError):
        LlmSettings(max_retries=-1)


def test_every_setting_is_described() -> None:
    assert all(f.description for f in LlmSettings.model_fields.values())
