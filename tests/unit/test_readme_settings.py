"""The README lists every setting with its default, generated from the settings classes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic_settings import BaseSettings

from habitus.config import Settings, settings_table
from habitus.service import registry

README = Path(__file__).resolve().parents[2] / "README.md"
#: the shared settings, then each service's own, from its descriptor
CLASSES: list[type[BaseSettings]] = [Settings, *(s.settings for s in registry.services()
                                                 if s.settings is not None)]


def test_readme_settings_table_is_the_generated_one() -> None:
    text = README.read_text()
    match = re.search(r"<!-- settings:start -->\n(.*?)<!-- settings:end -->", text, re.S)
    assert match, "README.md has no settings table"
    assert match.group(1) == settings_table(CLASSES), (
        "README.md's settings table is out of date: regenerate it with "
        "habitus.config.settings_table")


def test_a_setting_without_a_description_is_refused() -> None:
    class Undocumented(BaseSettings):
        quiet: int = 1

    with pytest.raises(ValueError, match="quiet has no description"):
        settings_table([Undocumented])


def test_rows_name_the_variable_and_its_default() -> None:
    table = settings_table([Settings])
    assert "| `HABITUS_HTTP_PORT` | `8080` |" in table
    assert "| `HABITUS_DATA_DIR` | `./var` |" in table
    assert "| `HABITUS_NATS_URL` | unset |" in table
