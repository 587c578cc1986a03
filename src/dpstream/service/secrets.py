"""Encryption of the database's secret columns with a key given to the service at start (optional).

With a database key (32 bytes, ``DPSTREAM_DATABASE_KEY`` as URL-safe base64), every stream's key
and mechanism state are sealed with AES-256-GCM before they reach the database; the associated
data names the row and the column, so a sealed value cannot be moved to another stream.  A
database is encrypted or not from its creation: ``dpstream_schema.encryption`` holds a sealed
check value, by which a missing or wrong key is refused at start, as is a key for a database
made without one.  Whoever reads the database (or a back-up of it) without the key learns no key
and no held-out value.

>>> box = SecretBox(bytes(range(32)))
>>> sealed = box.seal(b"secret", "stream/a/key")
>>> box.open(sealed, "stream/a/key")
b'secret'
>>> box.open(sealed, "stream/b/key")
Traceback (most recent call last):
dpstream.service.secrets.SecretError: a sealed secret of the database does not open with this key (stream/b/key).
"""

from __future__ import annotations

import base64
import binascii
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

__all__ = ["KEY_BYTES", "SecretBox", "SecretError", "parse_database_key"]

#: Length of a database key (AES-256).
KEY_BYTES = 32
_NONCE_BYTES = 12
_PREFIX = b"dpstream-aesgcm/1:"
_CHECK = b"dpstream database key check"


class SecretError(Exception):
    """The database key is missing, wrong, or given for a database made without one."""


def parse_database_key(text: str) -> bytes:
    """A database key from its URL-safe base64 text (e.g. ``python -c 'import secrets, base64;
    print(base64.urlsafe_b64encode(secrets.token_bytes(32)).decode())'``).

    >>> len(parse_database_key(base64.urlsafe_b64encode(bytes(32)).decode()))
    32
    >>> parse_database_key("short")
    Traceback (most recent call last):
    ValueError: the database key must be 32 bytes in URL-safe base64 (44 characters), got 5 characters.
    """
    try:
        key = base64.urlsafe_b64decode(text.strip().encode("ascii"))
    except (binascii.Error, ValueError, UnicodeEncodeError):
        key = b""
    if len(key) != KEY_BYTES:
        raise ValueError(f"the database key must be {KEY_BYTES} bytes in URL-safe base64 (44 characters), got "
                         f"{len(text.strip())} characters.")
    return key


class SecretBox:
    """AES-256-GCM with a random nonce per value; ``where`` (row and column) is the associated data."""

    def __init__(self, key: bytes) -> None:
        if not isinstance(key, bytes) or len(key) != KEY_BYTES:
            raise ValueError(f"a database key must be {KEY_BYTES} bytes.")
        self._aead = AESGCM(key)

    def __repr__(self) -> str:  # never shows the key
        return "SecretBox(<key>)"

    def seal(self, secret: bytes, where: str) -> bytes:
        nonce = os.urandom(_NONCE_BYTES)
        return _PREFIX + nonce + self._aead.encrypt(nonce, secret, where.encode())

    def open(self, sealed: bytes, where: str) -> bytes:
        if not sealed.startswith(_PREFIX):
            raise SecretError(f"a secret of the database is not sealed ({where}).")
        body = sealed[len(_PREFIX):]
        try:
            return self._aead.decrypt(body[:_NONCE_BYTES], body[_NONCE_BYTES:], where.encode())
        except InvalidTag:
            raise SecretError(f"a sealed secret of the database does not open with this key ({where}).") from None

    def seal_text(self, secret: str, where: str) -> str:
        return base64.b64encode(self.seal(secret.encode(), where)).decode("ascii")

    def open_text(self, sealed: str, where: str) -> str:
        try:
            raw = base64.b64decode(sealed.encode("ascii"), validate=True)
        except (binascii.Error, ValueError, UnicodeEncodeError):
            raise SecretError(f"a secret of the database is not sealed ({where}).") from None
        return self.open(raw, where).decode()

    def check_value(self) -> str:
        """The sealed check value a new encrypted database keeps."""
        return self.seal_text(_CHECK.decode(), "check")

    def verify(self, check: str) -> None:
        """SecretError unless ``check`` was sealed with this key."""
        if self.open_text(check, "check") != _CHECK.decode():  # pragma: no cover - GCM authenticates it
            raise SecretError("the database key check does not match.")
