"""The consul-template subset (client/template.py), the env file reading, secrets-hook
destinations, and the sealed reply a client opens (sealbox)."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from services.scheduler import sealbox
from services.scheduler.client import template as tmpl
from services.scheduler.client.secrets_hook import SecretsError, templates_of
from services.scheduler.tasksecrets import vault_block

KV = {"secret/data/app": {"data": {"data": {"password": "pw", "user": "u"}, "metadata": {}}}}


def render(src: str, secrets: dict | None = None, env: dict | None = None) -> str:
    return tmpl.render(tmpl.parse(src), KV if secrets is None else secrets, env or {})


def test_with_secret_fields_and_trimming() -> None:
    src = '{{ with secret "secret/data/app" }}PASSWORD={{ .Data.data.password }}{{ end }}'
    assert render(src) == "PASSWORD=pw"
    assert tmpl.secret_paths(tmpl.parse(src)) == ["secret/data/app"]
    src = 'a\n  {{- with secret "secret/data/app" -}}\n  [{{ .Data.data.user }}]\n{{- end }}'
    assert render(src) == "a[u]"


def test_range_env_if_else_and_missing_secret() -> None:
    src = (
        '{{ with secret "secret/data/app" }}{{ range $k, $v := .Data.data }}'
        "{{ $k }}={{ $v }}\n{{ end }}{{ end }}"
    )
    assert render(src) == "password=pw\nuser=u\n"
    assert render('home={{ env "HOME" }}', env={"HOME": "/h"}) == "home=/h"
    src = '{{ with secret "secret/data/none" }}yes{{ else }}no{{ end }}'
    assert render(src) == "no"
    src = '{{ with secret "secret/data/app" }}{{ if .Data.data.user }}U{{ end }}{{ end }}'
    assert render(src) == "U"
    assert render('{{ with secret "secret/data/app" }}{{ .Data.nope }}{{ end }}') == "<no value>"


@pytest.mark.parametrize(
    "src",
    [
        "{{ end }}",
        '{{ with secret "x" }}',
        "{{ else }}",
        "{{ printf }}",
        "{{ }}",
        '{{ with secret "unterminated }}{{ end }}',
    ],
)
def test_errors(src: str) -> None:
    with pytest.raises(tmpl.TemplateError):
        tmpl.parse(src)


def test_env_lines() -> None:
    text = "# c\nA=1\nexport B = \"two words\"\n\nbad line\nC='x=y'\n"
    assert tmpl.env_lines(text) == {"A": "1", "B": "two words", "C": "x=y"}


def test_template_destinations_stay_in_the_task_dir() -> None:
    ok = {"Templates": [{"EmbeddedTmpl": "x", "DestPath": "secrets/a.env", "Envvars": True}]}
    [t] = templates_of(ok)
    assert (t.dest, t.env, t.change_mode) == ("secrets/a.env", True, "restart")
    for dest in ("../x", "/etc/passwd", "local/../../x", ""):
        with pytest.raises(SecretsError):
            templates_of({"Templates": [{"EmbeddedTmpl": "x", "DestPath": dest}]})


def test_vault_block_from_json_or_hcl() -> None:
    assert vault_block({"Vault": {"Policies": ["a"]}}) == {
        "Policies": ["a"],
        "Env": True,
        "ChangeMode": "restart",
        "ChangeSignal": "",
    }
    assert vault_block({"Svc": {"policies": ["b"], "env": False}})["Env"] is False
    assert vault_block({"Vault": {"Policies": "a"}}) is None
    assert vault_block({}) is None


def test_sealbox_opens_only_for_its_key_and_context() -> None:
    key = X25519PrivateKey.generate()
    box = sealbox.seal(key.public_key().public_bytes_raw(), b"token", b"a1/t")
    assert sealbox.open_sealed(key, box, b"a1/t") == b"token"
    assert b"token" not in box
    with pytest.raises(sealbox.SealError):
        sealbox.open_sealed(key, box, b"a2/t")  # another allocation's context
    with pytest.raises(sealbox.SealError):
        sealbox.open_sealed(X25519PrivateKey.generate(), box, b"a1/t")
    with pytest.raises(sealbox.SealError):
        sealbox.seal(b"short", b"x", b"")
