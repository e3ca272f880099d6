"""The reference target's own storage: one SQLite file (WAL mode, a fresh connection per request,
every application in a ``BEGIN IMMEDIATE`` transaction so concurrent writers serialise on the file lock).

Publications are immutable and the ledger append-only, both enforced by triggers.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from galley.reference_target.protocol import receipt

_SCHEMA = """
CREATE TABLE IF NOT EXISTS publications (
    id            TEXT PRIMARY KEY,
    operation_key TEXT NOT NULL UNIQUE,
    brief_id      TEXT NOT NULL,
    revision      INTEGER NOT NULL CHECK (revision >= 1),
    payload_hash  TEXT NOT NULL,
    payload       TEXT NOT NULL,
    permalink     TEXT NOT NULL,
    published_at  TEXT NOT NULL,
    rendered      TEXT
);
CREATE INDEX IF NOT EXISTS publications_brief_revision ON publications (brief_id, revision);
CREATE TABLE IF NOT EXISTS ledger (
    seq           INTEGER PRIMARY KEY AUTOINCREMENT,
    operation_key TEXT NOT NULL,
    brief_id      TEXT NOT NULL,
    revision      INTEGER NOT NULL,
    payload_hash  TEXT NOT NULL,
    applied_at    TEXT NOT NULL
);
CREATE TRIGGER IF NOT EXISTS publications_immutable BEFORE UPDATE ON publications
BEGIN SELECT RAISE(ABORT, 'publications are immutable'); END;
CREATE TRIGGER IF NOT EXISTS publications_kept BEFORE DELETE ON publications
BEGIN SELECT RAISE(ABORT, 'publications are never deleted'); END;
CREATE TRIGGER IF NOT EXISTS ledger_no_update BEFORE UPDATE ON ledger
BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
CREATE TRIGGER IF NOT EXISTS ledger_no_delete BEFORE DELETE ON ledger
BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
"""


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


class Store:
    """The target's own SQLite storage. One connection per call site; never shared between threads."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @contextlib.contextmanager
    def connect(self) -> Iterator[sqlite3.Connection]:
        # isolation_level=None: no implicit transactions; applications say BEGIN IMMEDIATE themselves.
        conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
        try:
            conn.row_factory = sqlite3.Row
            # NORMAL in WAL mode survives a killed process (only an OS crash can lose the last commit).
            conn.execute("PRAGMA synchronous = NORMAL")
            yield conn
        finally:
            conn.close()

    def initialise(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.connect() as conn:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.executescript(_SCHEMA)
            # A file written before publications kept the rendered story: its rows have none (NULL).
            columns = {row["name"] for row in conn.execute("PRAGMA table_info(publications)")}
            if "rendered" not in columns:
                conn.execute("ALTER TABLE publications ADD COLUMN rendered TEXT")

    def by_key(self, conn: sqlite3.Connection, operation_key: str) -> sqlite3.Row | None:
        return conn.execute("SELECT * FROM publications WHERE operation_key = ?", (operation_key,)).fetchone()

    def by_id(self, conn: sqlite3.Connection, publication_id: str) -> sqlite3.Row | None:
        return conn.execute("SELECT * FROM publications WHERE id = ?", (publication_id,)).fetchone()

    def ledger(self, conn: sqlite3.Connection) -> list[dict[str, Any]]:
        rows = conn.execute(
            "SELECT operation_key, brief_id, revision, payload_hash, applied_at FROM ledger ORDER BY seq"
        ).fetchall()
        return [dict(row) for row in rows]

    def apply(
        self, conn: sqlite3.Connection, body: dict[str, Any], *, base_url: str, fence_off: bool
    ) -> tuple[int, dict[str, Any]]:
        """Apply one publication request in one BEGIN IMMEDIATE transaction; (status, response body).

        Re-checks the key inside the transaction, so two processes sharing the file still apply
        a key at most once.
        """
        conn.execute("BEGIN IMMEDIATE")
        try:
            existing = self.by_key(conn, body["operation_key"])
            if existing is not None:
                conn.execute("COMMIT")
                if existing["payload_hash"] == body["payload_hash"]:
                    return 200, receipt(existing)
                return 422, {
                    "error": "idempotency_mismatch",
                    "detail": "this operation key was applied with a different payload hash",
                }
            if not fence_off:
                (current,) = conn.execute(
                    "SELECT MAX(revision) FROM publications WHERE brief_id = ?", (body["brief_id"],)
                ).fetchone()
                if current is not None and current >= body["revision"]:
                    conn.execute("COMMIT")
                    return 409, {"error": "stale_revision", "current_revision": current}
            publication_id = f"pub-{uuid.uuid4().hex}"
            now = _now()
            payload_text = json.dumps(body["payload"], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
            rendered = body.get("rendered")
            rendered_text = None if rendered is None else json.dumps(rendered, sort_keys=True, ensure_ascii=False)
            conn.execute(
                "INSERT INTO publications (id, operation_key, brief_id, revision, payload_hash, payload,"
                " permalink, published_at, rendered) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    publication_id,
                    body["operation_key"],
                    body["brief_id"],
                    body["revision"],
                    body["payload_hash"],
                    payload_text,
                    f"{base_url}/articles/{publication_id}",
                    now,
                    rendered_text,
                ),
            )
            conn.execute(
                "INSERT INTO ledger (operation_key, brief_id, revision, payload_hash, applied_at)"
                " VALUES (?, ?, ?, ?, ?)",
                (body["operation_key"], body["brief_id"], body["revision"], body["payload_hash"], now),
            )
            row = self.by_key(conn, body["operation_key"])
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        if row is None:  # inserted by this very transaction: cannot be missing
            raise RuntimeError(f"publication {publication_id} was not found right after its insert")
        return 201, receipt(row)
