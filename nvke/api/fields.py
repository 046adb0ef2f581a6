"""Fields take the JSON type the schema says. DRF's CharField turns numbers into strings (`{"username": 0}`
became "0") and its BooleanField takes 0, 1, "yes" and "on"; after `strict_json_types` every CharField
(and its subclasses: regex, slug, e-mail, URL fields) answers anything but a string, and every
BooleanField anything but true or false, with 400 `invalid`. The API takes JSON bodies only (forms are
Django's, query parameters django-filter's), so nothing else reaches these fields. Applied once, for
every serializer, when the apps are ready (nvke.tenancy's AppConfig)."""

from rest_framework import fields

_char = fields.CharField.to_internal_value
_boolean = fields.BooleanField.to_internal_value


def _strict_string(self, data):
    if not isinstance(data, str):
        self.fail("invalid")
    return _char(self, data)


def _strict_boolean(self, data):
    if not isinstance(data, bool):
        self.fail("invalid")
    return _boolean(self, data)


def strict_json_types() -> None:
    fields.CharField.to_internal_value = _strict_string
    fields.BooleanField.to_internal_value = _strict_boolean
