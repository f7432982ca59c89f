"""Running the install script on a target host over SSH as the role's admin user (dynamic keys).

One exec per call: the script and the key line travel as quoted arguments of a short sh command
that writes them to a private temp dir in the admin's home, runs the script, and removes the dir.
No scp or sftp is needed on the target, only a POSIX shell and mktemp.
"""

from __future__ import annotations

import asyncio
import re
import shlex
from typing import Any

from services.secrets.errors import bad_request, upstream

CONNECT_TIMEOUT = 10.0
COMMAND_TIMEOUT = 30.0
# `~user` must stay unquoted for the remote shell to expand it: only plain names pass.
USERNAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")


def check_username(username: str) -> str:
    if not USERNAME.match(username):
        raise bad_request(
            f"invalid username {username!r} for a dynamic key: use letters, "
            "digits, '_', '.' and '-'"
        )
    return username


def install_command(action: str, key_line: str, script: str, username: str) -> str:
    """The remote command: a private temp dir, the key file and script in it, the script run
    against ~username/.ssh/authorized_keys, the dir removed on exit."""
    check_username(username)
    return (
        'umask 077; d=$(mktemp -d "${HOME:-/tmp}/.trellis-ssh.XXXXXX") || exit 1; '
        "trap 'rm -rf \"$d\"' EXIT; "
        f"printf '%s\\n' {shlex.quote(key_line.strip())} > \"$d/key.pub\" && "
        f"printf '%s' {shlex.quote(script)} > \"$d/install.sh\" && "
        'chmod 700 "$d/install.sh" && '
        f'"$d/install.sh" {action} "$d/key.pub" ~{username}/.ssh/authorized_keys'
    )


async def run_script(
    *,
    host: str,
    port: int,
    admin_user: str,
    admin_key: str,
    action: str,
    key_line: str,
    script: str,
    username: str,
) -> None:
    """Install or uninstall `key_line`; any failure is a 502 naming the host and the cause."""
    try:
        import asyncssh
    except ImportError:  # pragma: no cover - asyncssh is a declared dependency
        raise upstream("dynamic keys need the asyncssh package on the secrets service") from None
    command = install_command(action, key_line, script, username)
    where = f"{admin_user}@{host}:{port}"
    try:
        key = asyncssh.import_private_key(admin_key)
        # Like Vault's dynamic keys, the target's host key is not checked: the role's CIDR
        # list is what binds the credential to hosts.
        options: dict[str, Any] = {
            "port": port,
            "username": admin_user,
            "client_keys": [key],
            "known_hosts": None,
            "agent_path": None,
            "config": None,
            "preferred_auth": "publickey",
            "connect_timeout": CONNECT_TIMEOUT,
        }
        async with asyncssh.connect(host, **options) as conn:
            result = await asyncio.wait_for(conn.run(command, check=False), COMMAND_TIMEOUT)
    except (OSError, asyncssh.Error, asyncssh.KeyImportError) as exc:
        raise upstream(f"could not {action} the key on {where}: {_describe(exc)}") from None
    except TimeoutError:
        raise upstream(f"could not {action} the key on {where}: timed out") from None
    if result.exit_status != 0:
        detail = str(result.stderr or "").strip().splitlines()[-1:] or ["no error output"]
        raise upstream(
            f"the install script failed on {where} with status "
            f"{result.exit_status}: {detail[0][:300]}"
        )


def _describe(exc: BaseException) -> str:
    reason = getattr(exc, "reason", "") or str(exc) or type(exc).__name__
    return str(reason)[:300]
