"""POST /v1/validate/job: the job goes through the same admission as a register, but nothing
is written. As Nomad, a job that fails validation is a 200 whose body lists the errors; only a
body that is not a job at all is a 400."""

from __future__ import annotations

from typing import Any

from services.scheduler.admit import ValidationError, admit, multierror
from services.scheduler.api.context import ApiContext
from services.scheduler.api.http import Request, bad, ok
from services.scheduler.api.jobs import _api_job


async def validate_job(ctx: ApiContext, req: Request) -> Any:
    data = req.json()
    api_job = _api_job(req, data)
    ctx.require_ns(req, str(api_job.get("Namespace")), "read-job", "submit-job")
    errors: list[str] = []
    try:
        admit(api_job)
    except ValidationError as exc:
        errors = list(exc.errors)
    except (TypeError, AttributeError, KeyError, ValueError) as exc:
        raise bad(f"Failed to decode request body: {exc}") from None
    return ok(
        {
            "DriverConfigValidated": True,
            "ValidationErrors": errors or None,
            "Error": multierror(errors) if errors else "",
            "Warnings": "",
        }
    )
