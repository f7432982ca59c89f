"""Helpers the sys paths share."""

from __future__ import annotations

import json
from typing import Any

from services.secrets.framework.request import RawResponse, Response


def raw_json(data: Any, status: int = 200) -> Response:
    """Some sys endpoints answer plain JSON, not the envelope (init, seal status, health)."""
    return Response(raw=RawResponse(status=status, body=json.dumps(data).encode()))
