"""Every API error is JSON {code, message, details}; validation messages name the field."""

from django.conf import settings
from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.http import Http404, JsonResponse
from django.views import defaults
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from nvke.errors import DomainError


def _first_message(detail, path: str = "") -> str:
    if isinstance(detail, dict):
        key, value = next(iter(detail.items()))
        name = key if key != "non_field_errors" else ""
        return _first_message(value, f"{path}.{name}" if path and name else (name or path))
    if isinstance(detail, list) and detail:
        return _first_message(detail[0], path)
    return f"{path}: {detail}" if path else str(detail)


def _codes(detail):
    if isinstance(detail, dict):
        return {key: _codes(value) for key, value in detail.items()}
    if isinstance(detail, list):
        return [_codes(item) for item in detail]
    return {"message": str(detail), "code": getattr(detail, "code", "invalid")}


def _too_large() -> dict:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return {
        "code": "too_large",
        "message": f"The request body is larger than the {limit:,} bytes the API takes.",
        "details": {"limit_bytes": limit},
    }


def exception_handler(exc, context):
    if isinstance(exc, DomainError):
        return Response({"code": exc.code, "message": exc.message, "details": exc.details}, status=exc.status)
    if isinstance(exc, RequestDataTooBig):  # Django's, raised when DRF reads the body: HTML 400 otherwise
        return Response(_too_large(), status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE)
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        body = {
            "code": "invalid",
            "message": _first_message(exc.detail),
            "details": {"fields": _codes(exc.detail)},
        }
    else:
        detail = exc.detail if isinstance(exc, exceptions.APIException) else str(exc)
        code = exc.get_codes() if isinstance(exc, exceptions.APIException) else "error"
        body = {"code": code if isinstance(code, str) else "error", "message": str(detail), "details": {}}
        if isinstance(exc, exceptions.Throttled) and exc.wait:
            body["details"]["retry_after_s"] = int(exc.wait)
    response.data = body
    if response.status_code == status.HTTP_401_UNAUTHORIZED:
        response["WWW-Authenticate"] = 'Bearer realm="api"'
    return response


def _is_api(request) -> bool:
    return request.path.startswith("/api/")


def page_not_found(request, exception):
    """Django's 404 for URLs no route matches (`node-pools/abc/driver-options/`): under /api/ in the
    API's shape, elsewhere the UI's page."""
    if _is_api(request):
        return JsonResponse({"code": "not_found", "message": "Not found.", "details": {}}, status=404)
    return defaults.page_not_found(request, exception)


def bad_request(request, exception):
    """Django's 400 for what it refuses before a view answers (a SuspiciousOperation): under /api/ in
    the API's shape — a body over DATA_UPLOAD_MAX_MEMORY_SIZE as 413 — elsewhere the UI's page."""
    if not _is_api(request):
        return defaults.bad_request(request, exception)
    if isinstance(exception, RequestDataTooBig):
        return JsonResponse(_too_large(), status=413)
    body = {"code": "bad_request", "message": "The request was refused.", "details": {}}
    return JsonResponse(body, status=400)


def server_error(request):
    if _is_api(request):
        body = {"code": "server_error", "message": "The server failed to answer this request.", "details": {}}
        return JsonResponse(body, status=500)
    return defaults.server_error(request)
