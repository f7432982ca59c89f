"""The built-in install script and the remote command that runs it, run locally with /bin/sh on
a temporary authorized_keys file (the same command an SSH session would run)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from services.secrets.engines.ssh.install_script import BUILTIN_INSTALL_SCRIPT
from services.secrets.engines.ssh.remote import install_command
from services.secrets.errors import SecretsError

KEY = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAAAgQC7 key-under-test"
OTHER = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGhY other"


def _run(tmp: Path, action: str, key_line: str, authfile: Path) -> None:
    keyfile = tmp / "key.pub"
    keyfile.write_text(key_line + "\n")
    script = tmp / "install.sh"
    script.write_text(BUILTIN_INSTALL_SCRIPT)
    subprocess.run(
        ["/bin/sh", str(script), action, str(keyfile), str(authfile)],
        check=True,
        env={**os.environ, "HOME": str(tmp)},
        capture_output=True,
    )


def test_install_and_uninstall_keep_other_keys(tmp_path: Path) -> None:
    auth = tmp_path / "home" / ".ssh" / "authorized_keys"
    _run(tmp_path, "install", KEY, auth)  # creates the directory and file
    assert auth.read_text().splitlines() == [KEY]
    auth.write_text(OTHER + "\n" + KEY + "\n")
    _run(tmp_path, "install", KEY, auth)  # installing twice leaves one copy
    assert auth.read_text().splitlines() == [OTHER, KEY]
    _run(tmp_path, "uninstall", KEY, auth)
    assert auth.read_text().splitlines() == [OTHER]
    _run(tmp_path, "uninstall", KEY, auth)  # already gone: still fine
    assert auth.read_text().splitlines() == [OTHER]


def test_key_options_are_part_of_the_line(tmp_path: Path) -> None:
    auth = tmp_path / "authorized_keys"
    line = 'no-pty,command="/bin/true" ' + KEY
    _run(tmp_path, "install", line, auth)
    assert auth.read_text().splitlines() == [line]
    _run(tmp_path, "uninstall", line, auth)
    assert auth.read_text() == ""


def test_bad_action_is_refused(tmp_path: Path) -> None:
    with pytest.raises(subprocess.CalledProcessError):
        _run(tmp_path, "delete-everything", KEY, tmp_path / "authorized_keys")


def test_remote_command_runs_under_sh(tmp_path: Path) -> None:
    """The exact command sent over SSH, with the script and a hostile-looking key option
    quoted into it, run by sh with HOME in a temp dir (`~user` is replaced for the test)."""
    user = os.environ.get("USER") or "root"
    cmd = install_command(
        "install", "command=\"echo 'hi' $HOME\" " + KEY, BUILTIN_INSTALL_SCRIPT, "someone"
    )
    target = tmp_path / "auth" / "authorized_keys"
    cmd = cmd.replace("~someone/.ssh/authorized_keys", str(target))
    subprocess.run(
        ["/bin/sh", "-c", cmd],
        check=True,
        capture_output=True,
        env={**os.environ, "HOME": str(tmp_path), "USER": user},
    )
    assert target.read_text().splitlines() == ["command=\"echo 'hi' $HOME\" " + KEY]
    # The private temp dir is gone afterwards.
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".trellis-ssh.") and p.is_dir()]


@pytest.mark.parametrize("username", ["", "root;rm -rf /", "a b", "$(id)", "-x"])
def test_usernames_that_could_inject_are_refused(username: str) -> None:
    with pytest.raises(SecretsError, match="invalid username"):
        install_command("install", KEY, BUILTIN_INSTALL_SCRIPT, username)
