"""The DR state table: which operation moves a cluster from which mode to which (pure)."""

from __future__ import annotations

import enum

from shared.errors import ServiceError

DISABLED = "disabled"
PRIMARY = "primary"
SECONDARY = "secondary"


class Move(enum.StrEnum):
    ENABLE_PRIMARY = "enable primary"
    DEMOTE = "demote"
    DISABLE_PRIMARY = "disable primary"
    ENABLE_SECONDARY = "enable secondary"
    PROMOTE = "promote"
    UPDATE_PRIMARY = "update primary"
    DISABLE_SECONDARY = "disable secondary"


TABLE: dict[tuple[str, Move], str] = {
    (DISABLED, Move.ENABLE_PRIMARY): PRIMARY,
    (PRIMARY, Move.DEMOTE): SECONDARY,
    (PRIMARY, Move.DISABLE_PRIMARY): DISABLED,
    (DISABLED, Move.ENABLE_SECONDARY): SECONDARY,
    (SECONDARY, Move.PROMOTE): PRIMARY,
    (SECONDARY, Move.UPDATE_PRIMARY): SECONDARY,
    (SECONDARY, Move.DISABLE_SECONDARY): DISABLED,
}

_WHY = {
    (PRIMARY, Move.ENABLE_PRIMARY): "DR replication is already enabled: this cluster is a primary",
    (
        SECONDARY,
        Move.ENABLE_PRIMARY,
    ): "this cluster is a DR secondary: promote it to make it a primary",
    (
        PRIMARY,
        Move.ENABLE_SECONDARY,
    ): "this cluster is a DR primary: demote or disable it before enabling it as a secondary",
    (
        SECONDARY,
        Move.ENABLE_SECONDARY,
    ): "DR replication is already enabled: this cluster is a secondary",
}


def next_mode(mode: str, move: Move) -> str:
    """The mode after `move`, or a 400 that says why the move is not allowed from `mode`."""
    to = TABLE.get((mode, move))
    if to is not None:
        return to
    why = _WHY.get((mode, move))
    if why is None:
        needs = PRIMARY if move in (Move.DEMOTE, Move.DISABLE_PRIMARY) else SECONDARY
        why = f"cannot {move}: this cluster is {_article(mode)}, not a DR {needs}"
    raise ServiceError(400, why)


def require(mode: str, wanted: str, what: str) -> None:
    """Operations outside the table (secondary-token, operation tokens...) need one mode."""
    if mode != wanted:
        raise ServiceError(
            400, f"cannot {what}: this cluster is {_article(mode)}, not a DR {wanted}"
        )


def _article(mode: str) -> str:
    return "not replicating (DR disabled)" if mode == DISABLED else f"a DR {mode}"
