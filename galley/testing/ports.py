"""A free TCP port of 127.0.0.1, for whatever a test run starts (every port free, so pytest-xdist's processes
never meet)."""

from __future__ import annotations

import socket


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
