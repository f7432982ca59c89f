"""LIST answers: the keys, or a 404 when there are none, as Vault answers an empty list."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from services.secrets.errors import not_found
from services.secrets.framework.request import Response

if TYPE_CHECKING:
    from services.secrets.core.barrier import BarrierView


def listing(keys: list[str], info: dict[str, Any] | None = None) -> Response:
    """A LIST answer; nothing to list is a 404."""
    if not keys:
        raise not_found()
    data: dict[str, Any] = {"keys": keys}
    if info is not None:
        data["key_info"] = info
    return Response(data=data)


async def list_prefix(view: BarrierView, prefix: str) -> Response:
    """The LIST answer for the keys stored under `prefix` in `view`."""
    return listing(await view.list(prefix))
