"""Settings from the environment, through one helper.

Every environment variable Galley reads is read here, when the settings module asks for it,
never at import time of an app module. Values that fail to parse raise ImproperlyConfigured
naming the variable, so a typo is a clear startup error rather than a silent default.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str | None = None) -> str | None:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean (use true/false, 1/0, yes/no, on/off)")


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not an integer") from None


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a number") from None


def require(condition: bool, message: str) -> None:
    if not condition:
        raise ImproperlyConfigured(message)


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def var_dir() -> Path:
    """Where local state lives (embedded database, dev secret key, demo credentials): GALLEY_VAR_DIR or var/."""
    configured = os.environ.get("GALLEY_VAR_DIR")
    return Path(configured).resolve() if configured else Path(__file__).resolve().parent.parent / "var"


def secret_key(*, debug: bool, dev_key_file: Path) -> str:
    """SECRET_KEY from the environment; in development only, a per-checkout key kept under var/.

    Production (DEBUG off) refuses to start without one: a default key would sign every
    session with a value anyone can read.
    """
    key = os.environ.get("SECRET_KEY")
    if key:
        return key
    if not debug:
        raise ImproperlyConfigured(
            "SECRET_KEY is not set. Set it to a long random value (for example the output of "
            "`python -c 'import secrets; print(secrets.token_urlsafe(50))'`); "
            "only DEBUG=true may run without one."
        )
    dev_key_file.parent.mkdir(parents=True, exist_ok=True)
    if not dev_key_file.exists():
        dev_key_file.write_text(secrets.token_urlsafe(50))
        dev_key_file.chmod(0o600)
    return dev_key_file.read_text().strip()


def postgres_options(existing: str, **parameters: str) -> str:
    """libpq's `options` (server settings for the session): `existing`, e.g. from DATABASE_URL's
    query, with `-c name=value` for each of `parameters` in place of any value it gave them."""
    words = existing.split()
    kept: list[str] = []
    index = 0
    while index < len(words):
        word = words[index]
        # `-c name=value` or `-cname=value`
        width = 2 if word == "-c" else 1
        setting = words[index + 1] if width == 2 and index + 1 < len(words) else word.removeprefix("-c")
        if not (word.startswith("-c") and setting.split("=", 1)[0] in parameters):
            kept.extend(words[index : index + width])
        index += width
    return " ".join([*kept, *(f"-c {name}={value}" for name, value in parameters.items())])


def _hosts_and_ports(netloc: str) -> tuple[str, str]:
    """libpq's `host` and `port` lists from a URL's host part: `h1:p1,h2:p2` (an IPv6 address in
    brackets) becomes ("h1,h2", "p1,p2"); a host without a port takes the default (an empty entry)."""
    hosts: list[str] = []
    ports: list[str] = []
    for entry in netloc.split(","):
        host, port = entry, ""
        if entry.startswith("["):
            host, _, rest = entry[1:].partition("]")
            port = rest.removeprefix(":")
        elif ":" in entry:
            host, port = entry.rsplit(":", 1)
        if port and not port.isdigit():
            raise ImproperlyConfigured(f"DATABASE_URL names the port {port!r} of {host!r}, which is not a number")
        hosts.append(unquote(host))
        ports.append(port)
    return ",".join(hosts), ",".join(ports) if any(ports) else ""


def database_config(url: str) -> dict[str, Any]:
    """Django DATABASES entry for a postgresql:// URL (a `host=` query names a socket directory).

    Several hosts, as libpq allows (`postgresql://u@h1:5432,h2:5432/db?target_session_attrs=read-write`),
    become comma-separated HOST and PORT lists: libpq tries them in order and, with
    target_session_attrs, keeps the one that accepts writes, so a session follows a failover
    (docs/operations.md#failover).
    """
    parts = urlsplit(url)
    if parts.scheme not in {"postgres", "postgresql"}:
        raise ImproperlyConfigured(f"DATABASE_URL must be a postgresql:// URL, got scheme {parts.scheme!r}")
    query = {key: values[-1] for key, values in parse_qs(parts.query).items()}
    name = unquote(parts.path.lstrip("/")) or query.pop("dbname", "postgres")
    userinfo, _, netloc = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    hosts, ports = _hosts_and_ports(netloc) if netloc else ("", "")
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": name,
        "USER": unquote(user) or "postgres",
        "PASSWORD": unquote(password),
        "HOST": query.pop("host", None) or hosts,
        "PORT": query.pop("port", None) or ports,
        "OPTIONS": query,
    }
