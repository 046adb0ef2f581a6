"""Query-parameter filters that take only what the schema says. django-filter reads `pool=0.5` as a
decimal, `enabled=null` as "no filter", `until=` as absent, and an unknown id of a model choice as a
400: requests the schema calls invalid passed, and valid ones (an id nobody has) were refused.

- `StrictFilterSet`: the base of every filterset (the UI's lists use them too): references to other
  objects and integer columns take whole numbers (an id of nothing filters to nothing), booleans
  `true` or `false`.
- `FilterBackend` (the API's): besides, a parameter of a typed filter (a number, a boolean, a choice,
  a time) given empty is a 400 naming it. The UI's forms send empty fields for "any", so that rule is
  the API's alone."""

from copy import deepcopy

import django_filters
from django import forms
from django.db import models
from django_filters import rest_framework as filters
from django_filters.rest_framework import DjangoFilterBackend
from django_filters.utils import translate_validation
from rest_framework.exceptions import ValidationError

TRUE, FALSE = ("true", "True", "1"), ("false", "False", "0")


class IntegerFilter(filters.NumberFilter):
    """A whole number: an object's id or an integer column (django-filter's NumberFilter takes
    decimals). Any whole number is one: an id of nothing, negative or past bigint, filters to nothing
    (Django answers an out-of-range lookup with no rows)."""

    field_class = forms.IntegerField


class StrictBooleanField(forms.NullBooleanField):
    def to_python(self, value):
        if value in (None, ""):
            return None
        if value in TRUE or value is True:
            return True
        if value in FALSE or value is False:
            return False
        raise forms.ValidationError("Give true or false.", code="invalid")

    def validate(self, value) -> None:
        pass


class StrictBooleanFilter(django_filters.BooleanFilter):
    """`true` or `false`; DRF's BooleanWidget turned anything else into "no filter" before the field
    saw it, so the value reaches the field as it came."""

    field_class = StrictBooleanField

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("widget", forms.TextInput)
        super().__init__(*args, **kwargs)


_DEFAULTS = deepcopy(filters.FilterSet.FILTER_DEFAULTS)
_DEFAULTS.update(
    {
        models.ForeignKey: {"filter_class": IntegerFilter},
        models.OneToOneField: {"filter_class": IntegerFilter},
        **{
            field: {"filter_class": IntegerFilter}
            for field in (
                models.AutoField,
                models.BigAutoField,
                models.IntegerField,
                models.BigIntegerField,
                models.SmallIntegerField,
                models.PositiveIntegerField,
                models.PositiveBigIntegerField,
                models.PositiveSmallIntegerField,
            )
        },
        models.BooleanField: {"filter_class": StrictBooleanFilter},
    }
)


class StrictFilterSet(filters.FilterSet):
    FILTER_DEFAULTS = _DEFAULTS


class FilterBackend(DjangoFilterBackend):
    filterset_base = StrictFilterSet

    def filter_queryset(self, request, queryset, view):
        # django-filter's own, with the check of empty parameters: the filterset is built once per
        # request, not twice (each build deep-copies every filter), and not at all when no parameter
        # names one of its filters (a filter given no value filters nothing).
        filterset_class = self.get_filterset_class(view, queryset)
        if filterset_class is None or filterset_class.base_filters.keys().isdisjoint(request.query_params):
            return queryset
        filterset = self.get_filterset(request, queryset, view)
        if filterset is None:
            return queryset
        empty = [
            name
            for name, value in request.query_params.items()
            if value == "" and name in filterset.filters and not _takes_text(filterset.filters[name])
        ]
        if empty:
            raise ValidationError({name: ["Give a value or leave the parameter out."] for name in empty})
        if not filterset.is_valid() and self.raise_exception:
            raise translate_validation(filterset.errors)
        return filterset.qs


def _takes_text(filter_) -> bool:
    """Whether an empty string is a value of this filter (free text), not a missing one."""
    return issubclass(filter_.field_class, forms.CharField)
