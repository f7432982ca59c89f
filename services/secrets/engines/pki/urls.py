"""Authority information access: `config/urls` (issuing certificate, CRL distribution point and
OCSP URLs written into issued certificates), `config/cluster` (the values AIA templates use), and
the AIA a given issuer puts into what it signs."""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from services.secrets.engines.pki.models import ClusterConfig, IssuerEntry, UrlsConfig
from services.secrets.errors import bad_request
from services.secrets.framework.fields import CommaList
from services.secrets.framework.path import NoFields, Op, Operation, Path, write
from services.secrets.framework.request import Request, Response

if TYPE_CHECKING:
    from services.secrets.engines.pki.backend import PKIBackend

URL_FIELDS = (
    "issuing_certificates",
    "crl_distribution_points",
    "delta_crl_distribution_points",
    "ocsp_servers",
)


class UrlsFields(msgspec.Struct, kw_only=True):
    issuing_certificates: CommaList = []
    crl_distribution_points: CommaList = []
    delta_crl_distribution_points: CommaList = []
    ocsp_servers: CommaList = []
    enable_templating: bool = False


class ClusterFields(msgspec.Struct, kw_only=True):
    path: str = ""
    aia_path: str = ""


async def urls_config(b: PKIBackend) -> UrlsConfig:
    return await b.cfg.get_obj("config/urls", UrlsConfig) or UrlsConfig()


async def aia_for(b: PKIBackend, issuer: IssuerEntry) -> dict[str, list[str]]:
    """The AIA and CRL distribution points `issuer` writes: its own if any are set, else the
    mount's, with `{{issuer_id}}`, `{{cluster_path}}`, `{{cluster_aia_path}}` filled in."""
    own = [getattr(issuer, f) for f in URL_FIELDS]
    if any(own):
        values = dict(zip(URL_FIELDS, own, strict=True))
        templated = issuer.enable_aia_url_templating
    else:
        cfg = await urls_config(b)
        values = {f: getattr(cfg, f) for f in URL_FIELDS}
        templated = cfg.enable_templating
    if templated:
        cluster = await b.cfg.get_obj("config/cluster", ClusterConfig) or ClusterConfig()
        values = {f: [_fill(u, issuer.id, cluster) for u in v] for f, v in values.items()}
    return {
        "issuing_certificates": values["issuing_certificates"],
        "crl_distribution_points": values["crl_distribution_points"],
        "ocsp_servers": values["ocsp_servers"],
    }


def _fill(url: str, issuer_id: str, cluster: ClusterConfig) -> str:
    for marker, value in (
        ("{{cluster_path}}", cluster.path),
        ("{{cluster_aia_path}}", cluster.aia_path),
    ):
        if marker in url and not value:
            raise bad_request(
                f"cannot fill {marker} in AIA URL {url!r}: set it at config/cluster first"
            )
        url = url.replace(marker, value.rstrip("/"))
    return url.replace("{{issuer_id}}", issuer_id)


def paths(b: PKIBackend) -> list[Path]:
    async def read_urls(req: Request, f: NoFields) -> Response:
        return Response(data=msgspec.to_builtins(await urls_config(b)))

    async def write_urls(req: Request, f: UrlsFields) -> Response:
        # Only the fields given change; an empty string clears one.
        cfg = msgspec.to_builtins(await urls_config(b))
        given = msgspec.to_builtins(f)
        for key in req.data:
            if key in given:
                cfg[key] = given[key]
        updated = msgspec.convert(cfg, UrlsConfig)
        if not updated.enable_templating:
            for field in URL_FIELDS:
                for url in getattr(updated, field):
                    if "{{" in url:
                        raise bad_request(
                            f"{field} value {url!r} is a template but enable_templating is false"
                        )
        await b.cfg.put("config/urls", updated)
        return Response(data=msgspec.to_builtins(updated))

    async def read_cluster(req: Request, f: NoFields) -> Response:
        cfg = await b.cfg.get_obj("config/cluster", ClusterConfig) or ClusterConfig()
        return Response(data=msgspec.to_builtins(cfg))

    async def write_cluster(req: Request, f: ClusterFields) -> Response:
        cfg = ClusterConfig(path=f.path, aia_path=f.aia_path)
        await b.cfg.put("config/cluster", cfg)
        return Response(data=msgspec.to_builtins(cfg))

    return [
        Path(
            "config/urls",
            {
                Op.READ: Operation(read_urls, "Read the AIA URLs"),
                **write(write_urls, "Set the AIA URLs"),
            },
            UrlsFields,
            synopsis="URLs written into issued certificates (AIA, CRL distribution points).",
        ),
        Path(
            "config/cluster",
            {
                Op.READ: Operation(read_cluster, "Read the cluster paths"),
                **write(write_cluster, "Set the cluster paths"),
            },
            ClusterFields,
            synopsis="Values for AIA URL templates.",
        ),
    ]
