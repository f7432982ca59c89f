"""tests/teardown.py: a hung teardown step is cut off at its limit, the next steps still run,
and finish() fails naming it, with the asyncio task stacks printed."""

from __future__ import annotations

import asyncio

import pytest

from tests.teardown import Teardown

pytestmark = pytest.mark.asyncio


async def test_a_hung_step_is_named_and_the_rest_still_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    td = Teardown(limit=0.2)
    never = asyncio.Event()
    ran: list[str] = []

    async def hangs() -> None:
        await never.wait()

    async def quick() -> None:
        ran.append("quick")

    await td.step("stuck stop", hangs())
    await td.step("quick stop", quick())
    assert ran == ["quick"] and td.hung == ["stuck stop"]
    with pytest.raises(pytest.fail.Exception, match="stuck stop"):
        td.finish()
    assert "hangs" in capsys.readouterr().err  # the hung coroutine's stack


async def test_steps_that_finish_pass_and_their_errors_surface() -> None:
    td = Teardown(limit=5)

    async def broken() -> None:
        raise RuntimeError("stop failed")

    with pytest.raises(RuntimeError, match="stop failed"):
        await td.step("broken stop", broken())
    td.finish()
