"""Module-scoped `servers`, `nc` and `pool` on a bus and a database of the module's own (the
suite's Redis), for a module that rebuilds a projection from the start of its streams.

On the worker's shared bus such a rebuild folds every earlier module's events first (tens of
thousands late in a run): the extractor's replay made a model call per window of them, and the
learning cache's replay ran out of its wait. A module imports the three fixtures by name, which
makes them its own and overrides the session's ones:

    from tests.support.own_servers import own_nc, own_pool, own_servers  # noqa: F401

(each registered under the session fixture's name, so the tests ask for `servers`, `nc` and
`pool` as everywhere else).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import pytest_asyncio

from tests.conftest import ServerUrls, bus_client, database_pool
from tests.support.services import own_bus_and_database


@pytest.fixture(scope="module", name="servers")
def own_servers(servers: ServerUrls, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[ServerUrls]:
    with own_bus_and_database(servers, tmp_path_factory.mktemp("own-bus")) as own:
        yield own


@pytest_asyncio.fixture(scope="module", name="nc")
async def own_nc(servers: ServerUrls) -> AsyncIterator[Any]:
    async with bus_client(servers) as client:
        yield client


@pytest_asyncio.fixture(scope="module", name="pool")
async def own_pool(servers: ServerUrls) -> AsyncIterator[Any]:
    async with database_pool(servers) as p:
        yield p
