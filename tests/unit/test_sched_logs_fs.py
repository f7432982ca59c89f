"""Task log rotation and the confined view of an allocation's files."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from services.scheduler.client import fsops
from services.scheduler.client.logrotate import RotatingWriter, log_names


def test_rotation_keeps_newest_files(tmp_path: Path) -> None:
    w = RotatingWriter(str(tmp_path), "web", "stdout", max_files=3, max_size=10)
    for i in range(6):
        w.write(f"{i:09d}\n".encode())  # exactly one file each
    w.close()
    files = [(i, tmp_path / n) for i, n in log_names(str(tmp_path), "web", "stdout")]
    assert [i for i, _ in files] == [3, 4, 5]
    assert Path(files[0][1]).read_bytes() == b"000000003\n"
    assert all(stat.S_IMODE(os.stat(p).st_mode) == 0o600 for _, p in files)


def test_rotation_splits_a_large_write_and_resumes(tmp_path: Path) -> None:
    w = RotatingWriter(str(tmp_path), "t", "stderr", max_files=10, max_size=4)
    w.write(b"abcdefghij")
    w.close()
    w = RotatingWriter(str(tmp_path), "t", "stderr", max_files=10, max_size=4)
    w.write(b"kl")  # appends to the newest file, as after a task restart
    w.close()
    parts = [(tmp_path / n).read_bytes() for _, n in log_names(str(tmp_path), "t", "stderr")]
    assert parts == [b"abcd", b"efgh", b"ijkl"]


def test_read_logs_across_files(tmp_path: Path) -> None:
    logs = tmp_path / "alloc" / "logs"
    logs.mkdir(parents=True)
    w = RotatingWriter(str(logs), "t", "stdout", max_files=5, max_size=4)
    w.write(b"0123456789")
    w.close()
    whole = fsops.read_logs(str(tmp_path), "t", "stdout", "start", 0, 0)
    assert b"".join(d for _, _, d in whole) == b"0123456789"
    assert whole[0][0] == "alloc/logs/t.stdout.0"
    later = fsops.read_logs(str(tmp_path), "t", "stdout", "start", 5, 0)
    assert b"".join(d for _, _, d in later) == b"56789"
    tail = fsops.read_logs(str(tmp_path), "t", "stdout", "end", 3, 0)
    assert tail == [("alloc/logs/t.stdout.1", 3, b"7"), ("alloc/logs/t.stdout.2", 0, b"89")]


def test_a_log_position_survives_rotation(tmp_path: Path) -> None:
    logs = tmp_path / "alloc" / "logs"
    logs.mkdir(parents=True)
    w = RotatingWriter(str(logs), "t", "stdout", max_files=2, max_size=4)
    w.write(b"012345")
    at = fsops.log_position(str(tmp_path), "t", "stdout", "start", 0)
    frames, at, left = fsops.read_logs_at(str(tmp_path), "t", "stdout", at, 3)
    assert (b"".join(d for _, _, d in frames), at, left) == (b"012", (0, 3), 3)
    # Rotation deletes file 0 while the reader is in it: it goes on from the oldest kept file,
    # read whole (an offset of 3 from the oldest kept byte would skip "456").
    w.write(b"6789ab")
    w.close()
    frames, at, left = fsops.read_logs_at(str(tmp_path), "t", "stdout", at, 0)
    assert b"".join(d for _, _, d in frames) == b"456789ab"
    assert (at, left) == ((2, 4), 0)
    nothing = fsops.read_logs_at(str(tmp_path), "t", "stdout", at, 0)
    assert nothing == ([], (2, 4), 0)
    assert fsops.log_position(str(tmp_path), "t", "stdout", "end", 1) == (2, 3)


def test_paths_stay_inside_the_alloc_dir(tmp_path: Path) -> None:
    alloc = tmp_path / "a1"
    (alloc / "t" / "local").mkdir(parents=True)
    (alloc / "t" / "local" / "f").write_bytes(b"data")
    (tmp_path / "outside").write_bytes(b"secret")
    os.symlink(tmp_path / "outside", alloc / "t" / "local" / "link")
    assert fsops.read_at(str(alloc), "t/local/f", 1, 2) == b"at"
    assert [f["Name"] for f in fsops.ls(str(alloc), "/t/local")] == ["f", "link"]
    with pytest.raises(fsops.FsError) as exc:
        fsops.read_at(str(alloc), "t/../../outside", 0, 0)
    assert exc.value.code == 400
    with pytest.raises(fsops.FsError) as exc:
        fsops.read_at(str(alloc), "t/local/link", 0, 0)  # a symlink leading out
    assert exc.value.code == 403
    (alloc / "t" / "secrets").mkdir()
    (alloc / "t" / "secrets" / "vault_token").write_bytes(b"hvs.x")
    os.symlink(alloc / "t" / "secrets" / "vault_token", alloc / "t" / "local" / "tok")
    for path in ("t/secrets/vault_token", "t/secrets", "T/../t/SECRETS/x", "t/local/tok"):
        with pytest.raises(fsops.FsError) as exc:
            fsops.read_at(str(alloc), path, 0, 0)
        assert exc.value.code in (400, 403), path
    with pytest.raises(fsops.FsError) as exc:
        fsops.ls(str(alloc), "t/secrets")
    assert "prohibited" in exc.value.message
    with pytest.raises(fsops.FsError) as exc:
        fsops.stat(str(alloc), "nope")
    assert exc.value.code == 404


def test_read_stream_from_start_end_and_past_the_end(tmp_path: Path) -> None:
    (tmp_path / "alloc").mkdir()
    (tmp_path / "alloc" / "f.txt").write_bytes(b"0123456789")
    root = str(tmp_path)
    assert fsops.read_stream(root, "alloc/f.txt", "start", 4, 3) == (b"456", 10)
    assert fsops.read_stream(root, "alloc/f.txt", "end", 3, 100) == (b"789", 10)
    assert fsops.read_stream(root, "alloc/f.txt", "end", 50, 100) == (b"0123456789", 10)
    # Past the end: nothing, and the size tells the caller the file shrank (a truncation).
    assert fsops.read_stream(root, "alloc/f.txt", "start", 12, 100) == (b"", 10)
    with pytest.raises(fsops.FsError) as gone:
        fsops.read_stream(root, "alloc/none.txt", "start", 0, 10)
    assert gone.value.code == 404
    with pytest.raises(fsops.FsError) as folder:
        fsops.read_stream(root, "alloc", "start", 0, 10)
    assert folder.value.code == 400
