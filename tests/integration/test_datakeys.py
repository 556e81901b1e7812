"""A user's keys destroyed by one process are dropped by every other process that hears the
erasure's announcement, over real NATS, before its keyring's cache would have let them go."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from habitus.crypto.announce import KEYS_DESTROYED, destroyed
from habitus.crypto.keyring import Keyring, Shredded
from habitus.crypto.sealing import open_body, seal_body
from habitus.events import CATALOG
from tests.conftest import ServerUrls
from tests.support.factories import unique
from tests.support.services import echo_spec, running

pytestmark = pytest.mark.asyncio


async def test_a_running_service_drops_a_destroyed_key_when_the_erasure_says_so(
        servers: ServerUrls, nc: Any) -> None:
    tenant, user = unique("dk"), unique("ada")
    body = {"type": "TurnRecorded", "tenant_id": tenant, "user_id": user, "event_id": "e1",
            "payload": {"user_message": "Call me Ada Quillfeather."}}
    async with running(echo_spec(), servers.settings()):
        service = CATALOG.keyring  # the service's keyring (this process's catalog)
        assert service is not None
        sealed = seal_body(body, service)  # it holds ada's key now
        elsewhere = Keyring(service.kek, service.store)  # the erasing gateway, say
        assert elsewhere.destroy(tenant, user)
        assert open_body(sealed, service)["payload"] == body["payload"]  # its cached copy
        await nc.publish(KEYS_DESTROYED, destroyed(tenant, user))
        await nc.flush()
        for _ in range(100):
            try:
                open_body(sealed, service)
            except Shredded:
                break
            await asyncio.sleep(0.02)
        else:
            raise AssertionError("the service still opens the erased user's payload")
