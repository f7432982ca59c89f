"""An init opens the initialising replica's barrier for a moment (to write the root token and the
mounts) and seals it again. Meanwhile no peer may take the keyring from it (the cluster would
serve before any unseal key was given), and it must not stop asking its peers for the keyring
(it would stay sealed for good if the unseal share then missed it)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from tests.harness import start_cluster

pytestmark = pytest.mark.nats

# Longer than the pause between two asks for the keyring (at most 2 s).
SLOW = 2.5


async def test_an_init_neither_hands_out_the_keyring_nor_ends_the_asking(nats_url: str) -> None:
    c = await start_cluster(nats_url, replicas=2, initialize=False)
    try:
        cores = [svc.core for svc in c.secrets]
        in_init: set[int] = set()
        for core in cores:
            assert core is not None

            def slowed(
                step: Callable[..., Awaitable[Any]], core: Any = core, always: bool = False
            ) -> Callable[..., Awaitable[Any]]:
                async def slow(*args: Any, **kwargs: Any) -> Any:
                    # Stretch the init (its barrier is open) past a peer's next ask.
                    if always:
                        in_init.add(id(core))
                    elif id(core) in in_init:
                        await asyncio.sleep(SLOW)
                    return await step(*args, **kwargs)

                return slow

            core.first_unseal = slowed(core.first_unseal, always=True)  # type: ignore[method-assign]
            core.tokens.create_root = slowed(core.tokens.create_root)  # type: ignore[method-assign]
            core.pre_seal = slowed(core.pre_seal)  # type: ignore[method-assign]

        status, body = await c.request(
            "POST", "/v1/sys/init", token="", json={"secret_shares": 1, "secret_threshold": 1}
        )
        assert status == 200, body
        assert [core.sealed for core in cores if core] == [True, True]
        for core in cores:
            assert core is not None
            task = core.seal._handoff_task
            assert task is not None and not task.done(), "a replica stopped asking its peers"
    finally:
        await c.close()
