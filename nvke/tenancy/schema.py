from drf_spectacular.extensions import OpenApiAuthenticationExtension


class ApiTokenScheme(OpenApiAuthenticationExtension):
    """Documents `Authorization: Bearer nvke_…` in the OpenAPI schema."""

    target_class = "nvke.tenancy.authentication.ApiTokenAuthentication"
    name = "apiToken"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "An NVKE API token (nvke_…)."}
