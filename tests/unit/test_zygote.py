"""The zygote's pure parts: a forked command ends with the status `python -m` would give it."""

from __future__ import annotations

import pytest

from habitus.runtime.zygote import exit_code, preload


@pytest.mark.parametrize(("code", "status"), [(None, 0), (0, 0), (3, 3), (256 + 7, 7)])
def test_a_systemexit_code_is_the_status_the_interpreter_would_give(code: int | None,
                                                                    status: int) -> None:
    assert exit_code(code) == status


def test_a_systemexit_message_is_printed_and_the_status_is_1(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert exit_code("the database URL is not set") == 1
    assert capsys.readouterr().err == "the database URL is not set\n"


def test_preload_imports_calls_and_reports_what_failed() -> None:
    failed = preload(["json", "habitus.encoder:DIMENSIONS", "habitus.no_such_module",
                      "json:no_such_function"])
    assert failed[0].startswith("habitus.encoder:DIMENSIONS: TypeError")  # not callable
    assert failed[1].startswith("habitus.no_such_module: ModuleNotFoundError")
    assert failed[2].startswith("json:no_such_function: AttributeError")
    assert len(failed) == 3
