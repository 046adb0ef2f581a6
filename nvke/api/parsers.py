"""Request parsers that refuse NUL characters. PostgreSQL text cannot hold them, so a NUL that reached
a query (a slug lookup, a filter) was a server error; here it is a 400 naming the field."""

from django.http import JsonResponse
from rest_framework import parsers
from rest_framework.exceptions import ValidationError


def find_nul(data, path: str = "") -> str | None:
    """The path of the first string (or key) holding a NUL character, or None."""
    if isinstance(data, str):
        return (path or "body") if "\x00" in data else None
    if hasattr(data, "lists"):  # a QueryDict: one name, several values
        for key, values in data.lists():
            if "\x00" in key or any(isinstance(v, str) and "\x00" in v for v in values):
                return key
    elif isinstance(data, dict):
        for key, value in data.items():
            name = f"{path}.{key}" if path else str(key)
            if "\x00" in str(key):
                return name
            if (found := find_nul(value, name)) is not None:
                return found
    elif isinstance(data, list | tuple):
        for index, value in enumerate(data):
            if (found := find_nul(value, f"{path}[{index}]")) is not None:
                return found
    return None


def refuse_nul(data, source: str = "") -> None:
    if (field := find_nul(data, source)) is not None:
        raise ValidationError({field: ["Null characters are not allowed."]}, code="null_characters")


class _NulFree:
    def parse(self, stream, media_type=None, parser_context=None):
        parsed = super().parse(stream, media_type, parser_context)
        refuse_nul(parsed.data if isinstance(parsed, parsers.DataAndFiles) else parsed)
        return parsed


class JSONParser(_NulFree, parsers.JSONParser):
    pass


class FormParser(_NulFree, parsers.FormParser):
    pass


class MultiPartParser(_NulFree, parsers.MultiPartParser):
    pass


class RejectNulInQueryMiddleware:
    """The same for query parameters (filters, lookups) of API requests: 400 naming the parameter."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.path.startswith("/api/") and (name := find_nul(request.GET)) is not None:
            return JsonResponse(
                {
                    "code": "invalid",
                    "message": f"{name}: Null characters are not allowed.",
                    "details": {
                        "fields": {
                            name: [{"message": "Null characters are not allowed.", "code": "null_characters"}]
                        }
                    },
                },
                status=400,
            )
        return self.get_response(request)
