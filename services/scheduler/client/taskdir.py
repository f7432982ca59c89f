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


@dataclass(frozen=True)
class TaskUsers:
    """Who a root agent runs tasks as, as Nomad's exec driver and its `user.denylist`: a task
    that names no `user` runs as `default`; a uid-0 user only when `allow_root` says so."""

    default: str = "nobody"
    allow_root: bool = False


def resolve_user(user: str, policy: TaskUsers = TaskUsers()) -> RunAs:
    """The task's `user` (or the client's default): only a root agent can switch to it; an agent
    that is not root runs every task as itself."""
    if os.geteuid() != 0:
        if not user:
            return RunAs()
        try:
            pw = pwd.getpwnam(user)
        except KeyError:
            raise UserError(f"Failed to identify user {user!r}: unknown user") from None
        if pw.pw_uid == os.geteuid():
            return RunAs()
        raise UserError(f"cannot run the task as {user!r}: the client agent is not root")
    name = user or policy.default
    if not name:  # no default user: the task would run as the root agent itself
        if policy.allow_root:
            return RunAs()
        raise UserError("the client has no default task user and does not run tasks as root")
    try:
        pw = pwd.getpwnam(name)
    except KeyError:
        raise UserError(f"Failed to identify user {name!r}: unknown user") from None
    if pw.pw_uid == 0 and not policy.allow_root:
        raise UserError(
            f"running a task as {name!r} (uid 0) is not allowed on this client "
            "(client setting client_allow_root_tasks is off)"
        )
    groups = tuple(os.getgrouplist(name, pw.pw_gid))
    return RunAs(uid=pw.pw_uid, gid=pw.pw_gid, groups=groups, name=name)


def _mkdir(path: str, mode: int, owner: RunAs | None = None) -> None:
    """Create (or tighten) one directory; mkdir's mode means no moment with wider rights. Its
    parent may be the task's (local/ in its task dir, again at a restart): the name is opened
    without following a symlink the task put there, and changed through the descriptor."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, PRIVATE)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.fchmod(fd, mode)
        if owner is not None and owner.uid is not None:
            os.fchown(fd, owner.uid, owner.gid if owner.gid is not None else -1)
    finally:
        os.close(fd)


def build_alloc_dir(data_dir: str, dirs: TaskDirs, shared_owner: RunAs | None) -> None:
    """<data_dir>/alloc and the allocation's dir (0711), and its shared alloc/ (0700)."""
    os.makedirs(data_dir, mode=PRIVATE, exist_ok=True)
    root = os.path.dirname(dirs.alloc_dir)
    _mkdir(root, TRAVERSE)
    _mkdir(dirs.alloc_dir, TRAVERSE)
    _mkdir(dirs.shared, PRIVATE, shared_owner)


def build_task_dir(dirs: TaskDirs, owner: RunAs) -> None:
    """The task's own dir and its local/, secrets/ and tmp/, all 0700, owned by its user."""
    name = os.path.basename(dirs.task)
    if os.path.dirname(dirs.task) != dirs.alloc_dir or name in ("", ".", ".."):
        # A name like ".." would hand the task the dir of every allocation (the server
        # refuses it too: services/scheduler/admit.py).
        raise UserError(f"task name {name!r} is not a directory of its own")
    for path in (dirs.task, dirs.local, dirs.secrets, dirs.tmp):
        _mkdir(path, PRIVATE, owner)
