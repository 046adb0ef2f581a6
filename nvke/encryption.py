"""Secrets at rest (kubeconfigs, node join tokens): Fernet (AES-128-CBC + HMAC-SHA256) with keys from
the environment.

NVKE_ENCRYPTION_KEY holds one or more comma-separated Fernet keys (`python -c "from
cryptography.fernet import Fernet; print(Fernet.generate_key().decode())"`): the first encrypts, all
decrypt, so a key is rotated by putting the new one first. Without it — the embedded default — a
development key is derived from the secret key, a warning says so, and `check --deploy` flags it.

Use `EncryptedTextField` for a model field holding a secret: the database sees only ciphertext, the
audit log records that the field changed but never its value, and `repr` of the model shows nothing."""

import base64
import functools
import hashlib
import logging
import os

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.core import checks
from django.db import models

log = logging.getLogger(__name__)
MARK = "fernet:"  # stored values start with it, so a plain value left from before is recognised


@functools.cache
def _fernet() -> MultiFernet:
    if keys := [k.strip() for k in os.environ.get("NVKE_ENCRYPTION_KEY", "").split(",") if k.strip()]:
        return MultiFernet([Fernet(k) for k in keys])
    log.warning(
        "NVKE_ENCRYPTION_KEY is unset: secrets are encrypted with a development key derived from the "
        "secret key. Set NVKE_ENCRYPTION_KEY in production."
    )
    derived = hashlib.sha256(b"nvke-encryption:" + settings.SECRET_KEY.encode()).digest()
    return MultiFernet([Fernet(base64.urlsafe_b64encode(derived))])


def encrypt(plain: str) -> str:
    return MARK + _fernet().encrypt(plain.encode()).decode()


def decrypt(stored: str) -> str:
    if not stored.startswith(MARK):
        return stored  # written before encryption was configured; re-encrypted on its next save
    try:
        return _fernet().decrypt(stored.removeprefix(MARK).encode()).decode()
    except InvalidToken:
        raise ValueError("A stored secret does not decrypt with NVKE_ENCRYPTION_KEY.") from None


class Undecryptable(str):
    """A stored secret the configured keys do not decrypt (the key was replaced, not rotated): empty,
    so that the row still reads (a cluster list does not fail on one cluster), while `stored` keeps the
    ciphertext, which saving the row writes back unchanged: the right key still recovers it. Whatever
    would use the secret checks for it and says so (clusters.services.cluster_ref)."""

    stored: str

    def __new__(cls, stored: str) -> "Undecryptable":
        secret = super().__new__(cls, "")
        secret.stored = stored
        return secret


class EncryptedTextField(models.TextField):
    """A text field stored encrypted. Not searchable, not orderable: it is a secret."""

    def get_prep_value(self, value):
        if isinstance(value, Undecryptable):
            return value.stored
        value = super().get_prep_value(value)
        return value if value in (None, "") else encrypt(value)

    def from_db_value(self, value, expression, connection):
        if value in (None, ""):
            return value
        try:
            return decrypt(value)
        except ValueError as error:
            log.error("%s.%s: %s", self.model.__name__, self.name, error)
            return Undecryptable(value)


@checks.register(checks.Tags.security, deploy=True)
def encryption_key_check(app_configs, **kwargs) -> list[checks.CheckMessage]:
    if os.environ.get("NVKE_ENCRYPTION_KEY"):
        try:
            _fernet.cache_clear()
            _fernet()
        except ValueError as error:
            return [checks.Error(f"NVKE_ENCRYPTION_KEY is not a valid Fernet key: {error}", id="nvke.E001")]
        return []
    return [
        checks.Warning(
            "NVKE_ENCRYPTION_KEY is unset: secrets at rest use a key derived from the secret key.",
            hint="Generate one with Fernet.generate_key() and set NVKE_ENCRYPTION_KEY.",
            id="nvke.W001",
        )
    ]
