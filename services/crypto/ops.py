"""The table of crypto operations. Each op module declares a typed argument struct and a pure
function, and registers it here with `@operation("name", Args)`; the worker looks ops up by name.

Ops are plain synchronous functions: the worker runs them off its event loop, and tests can call
them directly without a bus.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import msgspec

F = TypeVar("F", bound=Callable[..., Any])


class CryptoFailure(Exception):
    """A request the op refuses (bad key type, malformed CSR...): a 400 with this message."""


@dataclass(frozen=True)
class OpSpec:
    name: str
    args: type[msgspec.Struct]
    fn: Callable[[Any], Any]


OPS: dict[str, OpSpec] = {}


def operation(name: str, args: type[msgspec.Struct]) -> Callable[[F], F]:
    def register(fn: F) -> F:
        if name in OPS:
            raise RuntimeError(f"crypto op {name!r} registered twice")
        OPS[name] = OpSpec(name, args, fn)
        return fn

    return register


_loaded = False


def load_all() -> None:
    """Import every op module so that its ops register (add new modules here). Once per
    process: scanning the package on every op cost a quarter of a cheap op's time."""
    global _loaded
    if _loaded:
        return
    import importlib
    import pkgutil

    import services.crypto as pkg

    for mod in pkgutil.iter_modules(pkg.__path__):
        if mod.name.startswith("ops_"):
            importlib.import_module(f"services.crypto.{mod.name}")
    _loaded = True


def run_local(name: str, args: dict[str, Any]) -> Any:
    """Validate and run an op in this process (the worker and the unit tests use this)."""
    load_all()
    spec = OPS.get(name)
    if spec is None:
        raise CryptoFailure(f"unknown crypto operation {name!r}")
    try:
        typed = msgspec.convert(args, spec.args)
    except msgspec.ValidationError as exc:
        raise CryptoFailure(f"invalid arguments for {name}: {exc}") from None
    return spec.fn(typed)
