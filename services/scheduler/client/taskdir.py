"""Build an allocation's directories on the host with restrictive modes from the start:
the alloc dir only traversable (0711), the shared alloc/ and each task's dir, local/, secrets/
and tmp/ private (0700) and owned by the user the task runs as."""

from __future__ import annotations

import contextlib
import os
import pwd
from dataclasses import dataclass

from services.scheduler.client.taskenv import TaskDirs

PRIVATE = 0o700
TRAVERSE = 0o711  # others may pass through to their own dir but not list it


@dataclass(frozen=True)
class RunAs:
    """Who a task runs as; None fields mean the agent's own user."""

    uid: int | None = None
    gid: int | None = None
    groups: tuple[int, ...] = ()
    name: str = ""


class UserError(Exception):
    pass


def resolve_user(user: str) -> RunAs:
    """The task's `user`, as Nomad's task `user`: only a root agent can switch to it."""
    if not user:
        return RunAs()
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        raise UserError(f"Failed to identify user {user!r}: unknown user") from None
    if os.geteuid() != 0:
        if pw.pw_uid == os.geteuid():
            return RunAs()
        raise UserError(f"cannot run the task as {user!r}: the client agent is not root")
    groups = tuple(os.getgrouplist(user, pw.pw_gid))
    return RunAs(uid=pw.pw_uid, gid=pw.pw_gid, groups=groups, name=user)


def _mkdir(path: str, mode: int, owner: RunAs | None = None) -> None:
    """Create (or tighten) one directory; mkdir's mode means no moment with wider rights."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, PRIVATE)
    os.chmod(path, mode)
    if owner is not None and owner.uid is not None:
        os.chown(path, owner.uid, owner.gid if owner.gid is not None else -1)


def build_alloc_dir(data_dir: str, dirs: TaskDirs, shared_owner: RunAs | None) -> None:
    """<data_dir>/alloc and the allocation's dir (0711), and its shared alloc/ (0700)."""
    os.makedirs(data_dir, mode=PRIVATE, exist_ok=True)
    root = os.path.dirname(dirs.alloc_dir)
    _mkdir(root, TRAVERSE)
    _mkdir(dirs.alloc_dir, TRAVERSE)
    _mkdir(dirs.shared, PRIVATE, shared_owner)


def build_task_dir(dirs: TaskDirs, owner: RunAs) -> None:
    """The task's own dir and its local/, secrets/ and tmp/, all 0700, owned by its user."""
    for path in (dirs.task, dirs.local, dirs.secrets, dirs.tmp):
        _mkdir(path, PRIVATE, owner)
