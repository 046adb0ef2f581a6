"""Domain errors. Each has a code and an HTTP status; the API renders them as {code, message, details}."""


class DomainError(Exception):
    status = 400
    code = "invalid"

    def __init__(self, message: str, *, field: str | None = None, code: str | None = None, **details):
        super().__init__(message)
        self.message = message
        self.field = field
        if code:
            self.code = code
        self.details = {"field": field, **details} if field else details

    def __reduce__(self):
        # Exception pickles as cls(*args) plus its dict: a subclass whose __init__ takes other arguments
        # (PlanChanged) would be called wrongly on the way back from Celery. Rebuilt without __init__.
        return (_rebuild, (type(self), self.args, self.__dict__))


def _rebuild(cls: type[DomainError], args: tuple, state: dict) -> DomainError:
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    error.__dict__.update(state)
    return error


class Conflict(DomainError):
    status = 409
    code = "conflict"


class Incompatible(DomainError):
    code = "incompatible"


class NotFound(DomainError):
    status = 404
    code = "not_found"


class ProviderFailed(DomainError):
    """The provider (the simulator, a Kubernetes API) refused or failed an operation asked of it now."""

    status = 502
    code = "provider_error"
