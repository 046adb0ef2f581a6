"""ApiError: a failure answered as a metav1.Status, shaped like kube-apiserver's."""

from __future__ import annotations

from typing import Any

REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class ApiError(Exception):
    def __init__(
        self,
        code: int,
        message: str,
        reason: str | None = None,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = REASONS.get(code, "") if reason is None else reason
        self.details = details
        self.headers = headers or {}

    def status(self) -> dict[str, Any]:
        return status_object(self.code, self.message, self.reason, self.details)


def status_object(
    code: int, message: str = "", reason: str = "", details: dict | None = None, success: bool = False
) -> dict[str, Any]:
    status: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}}
    status["status"] = "Success" if success else "Failure"
    if message:
        status["message"] = message
    if reason:
        status["reason"] = reason
    if details:
        status["details"] = details
    status["code"] = code
    return status


def _details(rt, name: str) -> dict[str, str]:
    details = {"name": name}
    if rt.group:
        details["group"] = rt.group
    details["kind"] = rt.plural
    return details


def not_found(rt, name: str) -> ApiError:
    return ApiError(404, f'{rt.qualified} "{name}" not found', details=_details(rt, name))


def already_exists(rt, name: str) -> ApiError:
    return ApiError(409, f'{rt.qualified} "{name}" already exists', "AlreadyExists", _details(rt, name))


def conflict(rt, name: str, why: str | None = None) -> ApiError:
    why = why or "the object has been modified; please apply your changes to the latest version and try again"
    return ApiError(
        409, f'Operation cannot be fulfilled on {rt.qualified} "{name}": {why}', details=_details(rt, name)
    )


def invalid(kind: str, name: str, causes: list[tuple[str, str, str]], group: str = "") -> ApiError:
    """causes: (field, reason, message) triples, as field.ErrorList renders them."""
    text = ", ".join(f"{field}: {message}" for field, _, message in causes)
    if len(causes) > 1:
        text = f"[{text}]"
    details: dict[str, Any] = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = kind
    details["causes"] = [{"reason": r, "message": m, "field": f} for f, r, m in causes]
    return ApiError(422, f'{kind} "{name}" is invalid: {text}', details=details)


def bad_request(message: str) -> ApiError:
    return ApiError(400, message)
