"""What a secret may show of itself in a log line: Galley API tokens and Authorization values.

A Galley API token is `galley_` and 43 URL-safe characters; the admin, the audit records and the
log show only its first characters (`prefix`), enough to tell tokens apart and useless to sign in
with. `redact` is the log's second wall: every line the console handler writes goes through it
(galley.logging), so that a secret reaching a log record by any path is cut to that prefix.
It lives with the token it describes (publishing's ApiToken), below the formatter that applies it:
no app imports anything of `galley`.
"""

from __future__ import annotations

import re

TOKEN_PREFIX = "galley_"  # noqa: S105  (a public marker that tells a Galley token apart, not a secret)
# The characters of a token that may be shown: the marker and six of its random ones.
TOKEN_SHOWN_CHARS = len(TOKEN_PREFIX) + 6
REDACTED = "[redacted]"

_TOKEN = re.compile(rf"({re.escape(TOKEN_PREFIX)}[A-Za-z0-9_-]{{6}})[A-Za-z0-9_-]+")
# A credential after an HTTP authentication scheme (Bearer and Basic carry nothing but one), as clients
# write them; eight characters at least, so that prose ("a Bearer token", "Basic checks") stays as it is.
_SCHEME_CREDENTIAL = re.compile(r"\b(Bearer|Basic|bearer|basic)(\s+)[A-Za-z0-9._~+/=-]{8,}")
# An Authorization header's value, as a header line, a dict or request.META prints it.
_AUTHORIZATION_VALUE = re.compile(r"""((?:HTTP_)?AUTHORIZATION['"]?\s*[:=]\s*['"]?)[^'"\r\n,}]+""", re.IGNORECASE)


def token_prefix(secret: str) -> str:
    """The part of a token that may be shown and stored (ApiToken.prefix)."""
    return secret[:TOKEN_SHOWN_CHARS]


def redact(text: str) -> str:
    """`text` with every Galley token cut to its prefix and every Authorization credential replaced."""
    text = _AUTHORIZATION_VALUE.sub(rf"\g<1>{REDACTED}", text)
    text = _SCHEME_CREDENTIAL.sub(rf"\g<1>\g<2>{REDACTED}", text)
    return _TOKEN.sub(r"\g<1>…", text)
