"""What dispatch decides for a request without a query or a namespace, remembered per method,
path and token.

A client sending the same method to the same path with the same token again gets the same answer
to every question before the handler: the mount, the route, the ACL object and capabilities, and
for a GET the fields (from the URL alone) and the ACL decision. A write still decodes its body,
resolves create/update and checks the ACL against its own parameters on every request (the ACL
memoizes decisions that do not depend on them). A plan keeps those answers with the objects they
were read from, and is used only while each of those is still the one in force:

- the mount table object and its generation (mounts added or removed in place), and the backend's
  path list (KV rebuilds it when a tune changes its version);
- the token entry object the token cache returns (a re-read, an invalidation or an expiry gives a
  new object or none) and the ACL object its policies map to (a policy change builds a new one).

Only for single-namespace clusters, unlimited-use tokens without an entity (identity policies are
read per request), and authenticated paths. Kept in memory only; cleared on seal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from services.secrets.acl import ACL
    from services.secrets.core.mounts import MountEntry, MountTable
    from services.secrets.core.tokens import TokenEntry
    from services.secrets.framework.backend import Backend, Routed
    from services.secrets.framework.path import Path

MAX_PLANS = 4096
_IMMUTABLE = (str, int, float, bool, bytes, type(None))


@dataclass(slots=True)
class Plan:
    table: MountTable
    generation: int
    paths: list[Path]
    backend: Backend
    mount: MountEntry
    rel: str
    routed: Routed
    fields: Any  # a GET's template: each request gets its own copy (`fields_for`)
    entry: TokenEntry
    acl: ACL
    capabilities: frozenset[str]
    acl_path: str = ""  # a write's, checked against each request's parameters

    def fields_for(self) -> Any:
        """The request's own fields: a shallow copy is a full one, as `plan` admits only
        fields made of immutable values (handlers may assign to their fields)."""
        return None if self.fields is None else self.fields.__copy__()


def copyable(fields: Any) -> bool:
    if fields is None:
        return True
    names = getattr(fields, "__struct_fields__", None)
    return names is not None and all(isinstance(getattr(fields, n), _IMMUTABLE) for n in names)


class RequestPlans:
    def __init__(self) -> None:
        self._plans: dict[tuple[str, str, str], Plan] = {}

    def get(self, method: str, path: str, token_id: str, table: MountTable | None) -> Plan | None:
        plan = self._plans.get((method, path, token_id))
        if (
            plan is None
            or plan.table is not table
            or plan.generation != table.generation
            or plan.backend.paths is not plan.paths
        ):
            return None
        return plan

    def put(self, method: str, path: str, token_id: str, plan: Plan) -> None:
        if len(self._plans) >= MAX_PLANS:
            self._plans.clear()  # client-chosen paths must not grow it without bound
        self._plans[(method, path, token_id)] = plan

    def clear(self) -> None:
        self._plans.clear()
