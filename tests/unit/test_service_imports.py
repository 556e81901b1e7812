"""A service process imports every service's descriptor (the data flow needs them all), so what
those modules import at their top is paid by every process `habitus up` starts. The OpenAI SDK
and numpy were a third of that; they are imported where a model is called or a vector made."""

from __future__ import annotations

import subprocess
import sys

#: imported only where they are used, never by starting a service
LAZY = ("openai", "numpy")


def test_starting_a_service_imports_neither_the_llm_sdk_nor_numpy() -> None:
    code = ("import sys; from habitus.service import registry; registry.services(); "
            "from habitus.service.host import ServiceHost; "
            f"print(','.join(m for m in {LAZY!r} if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)
    assert done.stdout.strip() == ""
