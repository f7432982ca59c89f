"""The web console's gateway side, pure parts: which API a `/ui/api/...` path reaches, and the
built assets the package ships (no inline script, nothing fetched from another host, rebuilt
from the current source)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from services.gateway import ui


def test_upstream_target_maps_each_api_and_keeps_the_rest_encoded() -> None:
    name, url = ui.upstream_target("/ui/api/secrets/v1/kv/data/a%2Fb", "version=2")  # type: ignore[misc]
    assert name == "secrets"
    assert url.raw_path == "/v1/kv/data/a%2Fb" and url.query_string == "version=2"
    name, url = ui.upstream_target("/ui/api/scheduler/v1/jobs", "")  # type: ignore[misc]
    assert name == "scheduler" and str(url) == "/v1/jobs"
    assert ui.upstream_target("/ui/api/workspace/", "")[1].raw_path == "/"  # type: ignore[index]


def test_upstream_target_refuses_unknown_apis_and_bare_prefixes() -> None:
    for path in ("/ui/api/", "/ui/api/secrets", "/ui/api/nomad/v1/jobs", "/ui/secrets", "/v1/x"):
        assert ui.upstream_target(path, "") is None


def test_the_package_ships_the_built_console() -> None:
    assets = ui.load_assets()
    assert {"index.html", "assets/app.js", "assets/app.css"} <= set(assets)
    index = assets["index.html"][0].decode()
    # Scripts only by src (the CSP forbids inline script), and every src/href is our own.
    assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", index)
    for ref in re.findall(r'(?:src|href)="([^"]+)"', index):
        assert ref.startswith("/ui/assets/"), ref
        assert ref.removeprefix("/ui/") in assets
    js = assets["assets/app.js"][0].decode()
    # No absolute address to fetch from: the page talks to its own origin only.
    assert not re.search(r"https?://(?!www\.w3\.org/)", js)
    assert "javascript" in assets["assets/app.js"][1]


def test_load_assets_serves_only_files_under_its_root(tmp_path: Path) -> None:
    (tmp_path / "index.html").write_text("<html></html>")
    (tmp_path / "assets").mkdir()
    (tmp_path / "assets" / "app.js").write_text("1")
    assert set(ui.load_assets(tmp_path)) == {"index.html", "assets/app.js"}
    assert ui.load_assets(tmp_path / "missing") == {}


def test_csp_is_strict() -> None:
    csp = ui.SECURITY_HEADERS["Content-Security-Policy"]
    assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert "unsafe" not in csp


def _source_digest(ui_dir: Path) -> str:
    """ui/build.mjs's digest of what it builds from: its own text, the lock file, ui/src/."""
    files = ["build.mjs", "package-lock.json"]
    files += [p.relative_to(ui_dir).as_posix() for p in (ui_dir / "src").rglob("*") if p.is_file()]
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + (ui_dir / name).read_bytes() + b"\0")
    return digest.hexdigest()


def test_the_built_assets_are_rebuilt_from_the_current_source() -> None:
    ui_dir = Path(ui.__file__).resolve().parents[2] / "ui"
    if not ui_dir.is_dir():
        pytest.skip("an installed package: the console's source is not beside it")
    stamp = (ui.STATIC_DIR / "source.sha256").read_text().strip()
    assert stamp == _source_digest(ui_dir), "ui/ changed: run `npm ci && npm run build` in ui/"
