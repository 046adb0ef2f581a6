"""String fields take strings. DRF's CharField turns numbers into strings (`{"username": 0}` became
"0"), though the schema says string; after `refuse_numbers_as_strings` every CharField (and its
subclasses: regex, slug, e-mail, URL fields) answers a number with 400 `invalid`. Applied once, for every
serializer, when the apps are ready (nvke.tenancy's AppConfig)."""

from rest_framework import fields

_original = fields.CharField.to_internal_value


def _strict(self, data):
    if not isinstance(data, str):
        self.fail("invalid")
    return _original(self, data)


def refuse_numbers_as_strings() -> None:
    fields.CharField.to_internal_value = _strict
