"""OpenAPI postprocessing: document the error responses every operation can give, in the one shape the
API uses ({code, message, details}), so clients and the schema fuzzer can rely on them."""

ERROR_SCHEMA = {
    "type": "object",
    "properties": {
        "code": {"type": "string", "example": "not_found"},
        "message": {"type": "string"},
        "details": {"type": "object", "additionalProperties": True},
    },
    "required": ["code", "message", "details"],
}
WHEN = {
    "400": "Invalid input; `message` names the field.",
    "401": "No, wrong, expired or revoked credentials.",
    "403": "Your role, or a read-only token, does not allow this.",
    "404": "No such object in your tenant.",
    "405": "Method not offered.",
    "406": "The Accept header asks for a format the API does not serve.",
    "409": "Conflict: duplicate name, a parent being deleted, a tenant quota.",
    "413": "The body is larger than the API takes (`too_large`, details.limit_bytes).",
    "415": "Unsupported request body media type.",
    "429": "Over the rate limit; see the Retry-After header.",
    "503": "The rate limiter's store does not answer (`rate_limiter_unavailable`); try again shortly.",
}
WRITE_ONLY = {"409", "413", "415"}


def document_errors(result: dict, generator, request, public) -> dict:
    result.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR_SCHEMA
    for path in result.get("paths", {}).values():
        for method, operation in path.items():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            for status, description in WHEN.items():
                if status in WRITE_ONLY and method in ("get", "head"):
                    continue
                operation["responses"].setdefault(
                    status,
                    {
                        "description": description,
                        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
                    },
                )
    return result
