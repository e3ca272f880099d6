"""Sealing credentials kept in the database (a channel's token or application password).

Fernet (AES-128-CBC with HMAC-SHA256, from `cryptography`) under a key derived from SECRET_KEY by
HKDF-SHA256 with a fixed label, so the key is never stored and a dump of the database alone opens
nothing. The label keeps this key apart from every other use Django makes of SECRET_KEY. Rotating
SECRET_KEY makes every sealed value unreadable: operators re-enter the credentials (docs/channels.md).
"""

from __future__ import annotations

import base64

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings

from publishing.errors import GalleyError

# Changing the label changes the key: every sealed value would have to be entered again.
_KEY_LABEL = b"galley:credentials:v1"


class SealedValueUnreadable(GalleyError):
    """A sealed value that the current SECRET_KEY cannot open (the key changed, or the value was damaged)."""


def _fernet() -> Fernet:
    # Derived on each call: SECRET_KEY is read lazily, and HKDF costs microseconds next to a send.
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_KEY_LABEL).derive(
        settings.SECRET_KEY.encode("utf-8")
    )
    return Fernet(base64.urlsafe_b64encode(key))


def seal(text: str) -> str:
    """`text` sealed (authenticated and encrypted) for storage; a different value on every call."""
    return _fernet().encrypt(text.encode("utf-8")).decode("ascii")


def unseal(sealed: str) -> str:
    """The text `seal` sealed; raises SealedValueUnreadable when this SECRET_KEY cannot open it.
    The message names no value: callers add what it belongs to and what to do."""
    try:
        return _fernet().decrypt(sealed.encode("ascii")).decode("utf-8")
    except (InvalidToken, ValueError):
        raise SealedValueUnreadable(
            "The stored credentials cannot be opened with the current SECRET_KEY (it changed since they were "
            "entered, or they were damaged); enter them again."
        ) from None
