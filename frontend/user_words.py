"""Errors in the words of the form a user filled in, from one place. The services and the API's
serializers speak the API's field names (gpu_memory, override_window: true, windows[0].recurrence) and
pass on a parser's own text; a form shows its labels instead, and a field whose parser speaks Python
gets a sentence of its own."""

import re

from django import forms
from django.forms.utils import pretty_name

# API field -> the form field that asks for it, where the names differ
API_FIELDS = {"gpu_memory_mib": "gpu_memory"}

# What to say when the field's value is refused, where the service's text would be a parser's
FIELD_WORDS = {
    "recurrence": "NVKE cannot read this rule. Write an RFC 5545 rule such as FREQ=WEEKLY;BYDAY=SA, "
    "FREQ=DAILY or FREQ=MONTHLY;BYDAY=1SU.",
}


def form_field(form: forms.Form, api_field: str | None) -> str | None:
    """The form's field for an API field name, or None (the error then shows above the form)."""
    name = API_FIELDS.get(api_field or "", api_field)
    return name if name in form.fields else None


def _label(form: forms.Form, name: str) -> str:
    return f"“{form.fields[name].label or pretty_name(name)}”"


def in_form_words(form: forms.Form, message: str) -> str:
    """The message with each API field name (an identifier with an underscore: plain words such as
    "name" stay as they are) replaced by the form's label for it, or written as words when the form
    does not ask for it."""
    names = {api: form_field(form, api) for api in API_FIELDS} | {name: name for name in form.fields}
    for api, name in names.items():
        if name is None or "_" not in api:
            continue
        label = _label(form, name)
        if isinstance(form.fields[name], forms.BooleanField):  # "ask again with override_window: true"
            message = message.replace(f"ask again with {api}: true", f"tick {label} and ask again")
        message = re.sub(rf"\b{re.escape(api)}\b", label, message)
    # An API field the form does not ask for (max_surge): in words ("max surge").
    return re.sub(r"\b[a-z]+(?:_[a-z]+)+\b", lambda match: match.group().replace("_", " "), message)


def serializer_error(form: forms.Form, errors: dict) -> tuple[str | None, str]:
    """The first error of a DRF serializer as (the form's field or None, the user's words). A nested
    field's path ("windows[0].recurrence") names the form's field by its last part."""
    path, problems = next(iter(errors.items()))
    problem = problems[0] if isinstance(problems, list) else problems
    field = form_field(form, re.split(r"[.\]]", str(path))[-1])
    if field in FIELD_WORDS:
        return field, FIELD_WORDS[field]
    return field, in_form_words(form, str(problem))
