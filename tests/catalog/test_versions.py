"""Driver and CUDA versions: ordered as versions, and only dotted numbers count as driver versions."""

import pytest
from django.core.exceptions import ValidationError
from packaging.version import InvalidVersion

from catalog.models import validate_version
from catalog.versions import is_valid_version, version_key


@pytest.mark.parametrize("version", ["570.133.20", "550.90.07", "12.8", "0.1"])
def test_dotted_numbers_are_versions(version):
    assert is_valid_version(version)
    validate_version(version)


@pytest.mark.parametrize(
    "version",
    # The last five are PEP 440 forms packaging would parse, or what int() used to take: no driver has them.
    ["", "570", "570.", ".570", "570..1", "570.a", "v570.1", "570.1rc1", "1!570.1", " 570.1", "570_000.1"],
)
def test_anything_else_is_refused(version):
    assert not is_valid_version(version)
    with pytest.raises(ValidationError):
        validate_version(version)


def test_versions_compare_as_numbers_not_text():
    assert version_key("570.9.1") < version_key("570.10.0") < version_key("580.65.06")
    assert version_key("550.90.07") == version_key("550.90.7")  # leading zeros are NVIDIA's spelling
    assert version_key("12") == version_key("12.0") < version_key("12.8")  # CUDA may be a bare major
    assert sorted(["12.10", "12.8", "11.8"], key=version_key) == ["11.8", "12.8", "12.10"]


def test_a_non_version_raises_a_value_error():
    with pytest.raises(InvalidVersion) as raised:
        version_key("abc")
    assert isinstance(raised.value, ValueError)
