"""PROVISIONAL (spine branch only; replaced by the channels-admin branch's sealing at merge)."""

from __future__ import annotations

import base64


def seal(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def unseal(sealed: str) -> str:
    return base64.b64decode(sealed.encode()).decode()
