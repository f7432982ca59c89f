"""`trellis dev` hands run tasks a terraform their unprivileged user can execute
(services/dev_tools.py): a binary behind a private dir is linked or copied into the data dir's
tools/ dir, readable and executable by every user; the original is left as it was."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.dev_tools import task_terraform
from shared.task_python import world_executable


@pytest.fixture
def data_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="trellis-devtools-"))
    path.chmod(0o711)  # as a root `trellis dev` leaves it
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _binary(where: Path, mode: int) -> Path:
    where.mkdir(mode=0o700)
    path = where / "terraform"
    path.write_bytes(b"\x7fELF not really")
    path.chmod(mode)
    return path


@pytest.mark.parametrize("mode", [0o755, 0o700])
def test_a_binary_behind_a_private_dir_is_handed_over(
    data_dir: Path, tmp_path: Path, mode: int
) -> None:
    private = _binary(tmp_path / "home", mode)
    assert not world_executable(str(private))
    handed = task_terraform(data_dir, str(private))
    assert handed == str(data_dir / "tools" / "terraform")
    assert world_executable(handed)
    assert Path(handed).read_bytes() == private.read_bytes()
    assert stat.S_IMODE(os.stat(data_dir / "tools").st_mode) == 0o711
    assert stat.S_IMODE(private.stat().st_mode) == mode  # the original keeps its mode
    # Again (a restarted dev with the same data dir): the same path.
    assert task_terraform(data_dir, str(private)) == handed


def test_a_world_executable_binary_is_used_where_it_is(data_dir: Path) -> None:
    path = data_dir / "open"
    path.mkdir(mode=0o755)
    path.chmod(0o755)
    binary = path / "terraform"
    binary.write_bytes(b"\x7fELF")
    binary.chmod(0o755)
    assert task_terraform(data_dir, str(binary)) == str(binary)
    assert not (data_dir / "tools").exists()


def test_no_terraform_is_none(data_dir: Path) -> None:
    assert task_terraform(data_dir, str(data_dir / "missing")) is None
