"""A task's secrets on the client (Nomad's vault and template hooks): before the task starts,
its token goes to secrets/vault_token (and VAULT_TOKEN when the vault block's env is true) and
each template is rendered to its destination in the task dir (and into the environment with
env = true); while it runs, the secrets are read again every poll interval and a changed
rendering triggers the template's change_mode: restart, signal or noop."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from services.scheduler.client import template as tmpl
from services.scheduler.client.beneath import write_file
from services.scheduler.tasksecrets import vault_block

# (alloc id, task name, secret paths) -> {"token": ..., "secrets": {path: response or None}}
Fetch = Callable[[str, str, list[str]], Awaitable[dict[str, Any]]]
TOKEN_FILE = "vault_token"


class SecretsError(Exception):
    pass


@dataclass
class Template:
    dest: str  # relative to the task dir
    nodes: list[tmpl.Node]
    env: bool
    change_mode: str
    change_signal: str
    perms: int


def templates_of(task: dict[str, Any]) -> list[Template]:
    out = []
    for raw in task.get("Templates") or []:
        if not isinstance(raw, dict):
            continue
        dest = str(raw.get("DestPath") or "")
        rel = os.path.normpath(dest) if dest else ""
        if not rel or rel.startswith("..") or os.path.isabs(rel):
            raise SecretsError(f"template destination {dest!r} must stay inside the task dir")
        try:
            nodes = tmpl.parse(str(raw.get("EmbeddedTmpl") or ""))
        except tmpl.TemplateError as exc:
            raise SecretsError(f"Template failed: {exc}") from None
        try:
            perms = int(str(raw.get("Perms") or "0644"), 8)
        except ValueError:
            perms = 0o644
        out.append(
            Template(
                dest=rel,
                nodes=nodes,
                env=bool(raw.get("Envvars")),
                change_mode=str(raw.get("ChangeMode") or "restart"),
                change_signal=str(raw.get("ChangeSignal") or ""),
                perms=perms & 0o777,
            )
        )
    return out


def needs_hook(task: dict[str, Any]) -> bool:
    return vault_block(task) is not None or bool(task.get("Templates"))


class SecretsHook:
    def __init__(
        self,
        task: dict[str, Any],
        task_dir: str,
        fetch: Fetch,
        alloc_id: str,
        uid: int | None = None,
        gid: int | None = None,
    ) -> None:
        self.task = task
        self.task_dir = task_dir
        self.fetch = fetch
        self.alloc_id = alloc_id
        self.uid, self.gid = uid, gid
        self.vault = vault_block(task)
        self.templates = templates_of(task)
        self.paths = list(
            dict.fromkeys(p for t in self.templates for p in tmpl.secret_paths(t.nodes))
        )
        self.rendered: dict[str, str] = {}

    async def _render_all(self, base_env: dict[str, str]) -> tuple[dict[str, str], str]:
        got = await self.fetch(self.alloc_id, self.task["Name"], self.paths)
        token = str(got.get("token") or "")
        secrets = got.get("secrets") or {}
        out = {}
        for t in self.templates:
            out[t.dest] = tmpl.render(t.nodes, secrets, base_env)
        return out, token

    def _write(self, rendered: dict[str, str]) -> None:
        for t in self.templates:
            text = rendered[t.dest]
            mode = 0o600 if t.dest.split(os.sep)[0] == "secrets" else t.perms
            # The task owns its dir: never through a symlink it planted (beneath.py).
            write_file(self.task_dir, t.dest, text.encode(), mode, self.uid, self.gid)

    def env_from(self, rendered: dict[str, str]) -> dict[str, str]:
        env: dict[str, str] = {}
        for t in self.templates:
            if t.env:
                env.update(tmpl.env_lines(rendered[t.dest]))
        return env

    async def prestart(self, base_env: dict[str, str]) -> dict[str, str]:
        """Render and write everything; the variables the task's environment gains."""
        rendered, token = await self._render_all(base_env)
        extra: dict[str, str] = {}
        if self.vault is not None:
            write_file(
                self.task_dir, f"secrets/{TOKEN_FILE}", token.encode(), 0o600, self.uid, self.gid
            )
            if self.vault["Env"]:
                extra["VAULT_TOKEN"] = token
        self._write(rendered)
        self.rendered = rendered
        extra.update(self.env_from(rendered))
        return extra

    async def poll(self, base_env: dict[str, str]) -> list[Template] | None:
        """Read again; the templates whose output changed (written already), or None."""
        rendered, _ = await self._render_all(base_env)
        changed = [t for t in self.templates if rendered[t.dest] != self.rendered.get(t.dest)]
        if not changed:
            return None
        self._write(rendered)
        self.rendered = rendered
        return changed
