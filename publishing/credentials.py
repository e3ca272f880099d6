"""Credentials at rest: sealed with Fernet (AES-128-CBC + HMAC-SHA256) under a key derived from
SECRET_KEY, so a database dump alone reveals no secret. Write-only by design: the admin sets a
secret and shows only whether one is set; nothing logs, audits or displays what `unseal` returns.
Rotating SECRET_KEY makes the sealed values unreadable: set them again afterwards."""

from __future__ import annotations

import base64
import hashlib

from cryptography.fernet import Fernet
from django.conf import settings

# Separates this key from every other use of SECRET_KEY (sessions, signing): one derivation, one purpose.
_PURPOSE = b"galley.credentials.v1"


def _fernet() -> Fernet:
    digest = hashlib.sha256(_PURPOSE + b"\x00" + settings.SECRET_KEY.encode("utf-8")).digest()
    return Fernet(base64.urlsafe_b64encode(digest))


def seal(text: str) -> str:
    """`text` encrypted and authenticated, as ASCII to store in a text column."""
    return _fernet().encrypt(text.encode("utf-8")).decode("ascii")


def unseal(sealed: str) -> str:
    """The text `seal` was given; raises cryptography.fernet.InvalidToken if it was sealed under
    another SECRET_KEY or altered."""
    return _fernet().decrypt(sealed.encode("ascii")).decode("utf-8")
