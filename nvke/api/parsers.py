"""Request parsers that refuse NUL characters and bodies nested too deep. PostgreSQL text cannot hold
NULs, so a NUL that reached a query (a slug lookup, a filter) was a server error; here it is a 400 naming
the field. A few KB of nested arrays ran the JSON decoder (and anything walking the result) out of
stack: a RecursionError, a 500; bodies deeper than MAX_DEPTH are now a 400."""

from django.http import JsonResponse
from rest_framework import parsers
from rest_framework.exceptions import ParseError, ValidationError

MAX_DEPTH = 32  # levels of arrays and objects; the deepest body NVKE takes (a telemetry batch) has 4
TOO_DEEP = f"The body nests arrays and objects more than {MAX_DEPTH} levels deep."


def find_nul(data, path: str = "") -> str | None:
    """The path of the first string (or key) holding a NUL character, or None. Walks without
    recursion; raises ParseError for data nested deeper than MAX_DEPTH."""
    if hasattr(data, "lists"):  # a QueryDict: one name, several values
        for key, values in data.lists():
            if "\x00" in key or any(isinstance(v, str) and "\x00" in v for v in values):
                return key
        return None
    stack = [(data, path, 0)]
    while stack:
        value, where, depth = stack.pop()
        if isinstance(value, str):
            if "\x00" in value:
                return where or "body"
            continue
        if isinstance(value, dict | list | tuple) and depth >= MAX_DEPTH:
            raise ParseError(TOO_DEEP)
        if isinstance(value, dict):
            children = []
            for key, child in value.items():
                name = f"{where}.{key}" if where else str(key)
                if "\x00" in str(key):
                    return name
                children.append((child, name))
        elif isinstance(value, list | tuple):
            children = [(child, f"{where}[{index}]") for index, child in enumerate(value)]
        else:
            continue
        stack.extend((child, name, depth + 1) for child, name in reversed(children))
    return None


def refuse_nul(data, source: str = "") -> None:
    if (field := find_nul(data, source)) is not None:
        raise ValidationError({field: ["Null characters are not allowed."]}, code="null_characters")


class _NulFree:
    def parse(self, stream, media_type=None, parser_context=None):
        try:
            parsed = super().parse(stream, media_type, parser_context)
        except RecursionError:  # the decoder itself ran out of stack: far deeper than MAX_DEPTH
            raise ParseError(TOO_DEEP) from None
        refuse_nul(parsed.data if isinstance(parsed, parsers.DataAndFiles) else parsed)
        return parsed


class JSONParser(_NulFree, parsers.JSONParser):
    pass


def _query_error(name: str, message: str, code: str) -> JsonResponse:
    return JsonResponse(
        {
            "code": "invalid",
            "message": f"{name}: {message}",
            "details": {"fields": {name: [{"message": message, "code": code}]}},
        },
        status=400,
    )


class RejectNulInQueryMiddleware:
    """The same for query parameters (filters, lookups) of API requests: 400 naming the parameter. A
    parameter given twice is a 400 too: every one the API takes is a single value, and Django would
    quietly use the last."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.path.startswith("/api/"):
            if (name := find_nul(request.GET)) is not None:
                return _query_error(name, "Null characters are not allowed.", "null_characters")
            for name, values in request.GET.lists():
                if len(values) > 1:
                    return _query_error(name, "Give this parameter once.", "repeated")
        return self.get_response(request)
