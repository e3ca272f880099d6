"""The reference target's own storage: one SQLite file (WAL mode, a fresh connection per request,
every application in a ``BEGIN IMMEDIATE`` transaction so concurrent writers serialise on the file lock).

Publications are immutable, the ledger and the retractions append-only, all enforced by triggers. A
publication is retracted while a retraction of its brief names its revision or a newer one
(docs/target-protocol.md#retraction): its state is computed, never written onto the row.
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

from galley.reference_target.protocol import receipt, retraction_receipt

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
CREATE TABLE IF NOT EXISTS retractions (
    operation_key  TEXT PRIMARY KEY,
    publication_id TEXT NOT NULL REFERENCES publications (id),
    brief_id       TEXT NOT NULL,
    revision       INTEGER NOT NULL CHECK (revision >= 1),
    reason         TEXT NOT NULL,
    retracted_at   TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS retractions_brief_revision ON retractions (brief_id, revision);
CREATE TRIGGER IF NOT EXISTS retractions_no_update BEFORE UPDATE ON retractions
BEGIN SELECT RAISE(ABORT, 'retractions are append-only'); END;
CREATE TRIGGER IF NOT EXISTS retractions_no_delete BEFORE DELETE ON retractions
BEGIN SELECT RAISE(ABORT, 'retractions are append-only'); END;
CREATE TRIGGER IF NOT EXISTS publications_immutable BEFORE UPDATE ON publications
BEGIN SELECT RAISE(ABORT, 'publications are immutable'); END;
CREATE TRIGGER IF NOT EXISTS publications_kept BEFORE DELETE ON publications
BEGIN SELECT RAISE(ABORT, 'publications are never deleted'); END;
CREATE TRIGGER IF NOT EXISTS ledger_no_update BEFORE UPDATE ON ledger
BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
CREATE TRIGGER IF NOT EXISTS ledger_no_delete BEFORE DELETE ON ledger
BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
"""


# A publication with its computed retraction: the first retraction of its brief at its revision or a newer one.
_PUBLICATION = (
    "SELECT p.*, (SELECT MIN(r.retracted_at) FROM retractions r"
    " WHERE r.brief_id = p.brief_id AND r.revision >= p.revision) AS retracted_at FROM publications p"
)


def retraction_replay(existing: sqlite3.Row, publication_id: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """The answer to a retraction whose key is already applied: the same receipt (200) for the same
    publication, brief, revision and reason, else 422."""
    sent = (publication_id, body["brief_id"], body["revision"], body["reason"])
    if (existing["publication_id"], existing["brief_id"], existing["revision"], existing["reason"]) == sent:
        return 200, retraction_receipt(existing)
    return 422, {
        "error": "idempotency_mismatch",
        "detail": "this retraction key was applied to another publication, revision or reason",
    }


@contextlib.contextmanager
def _immediate(conn: sqlite3.Connection) -> Iterator[None]:
    """One BEGIN IMMEDIATE transaction: committed when the block ends (a return included), rolled back
    when it raises."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _inserted(row: sqlite3.Row | None, name: str) -> sqlite3.Row:
    if row is None:  # inserted by the transaction that just committed: cannot be missing
        raise RuntimeError(f"{name} was not found right after its insert")
    return row


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
        return conn.execute(f"{_PUBLICATION} WHERE p.operation_key = ?", (operation_key,)).fetchone()

    def by_id(self, conn: sqlite3.Connection, publication_id: str) -> sqlite3.Row | None:
        return conn.execute(f"{_PUBLICATION} WHERE p.id = ?", (publication_id,)).fetchone()

    def newest_of_brief(self, conn: sqlite3.Connection, brief_id: str) -> sqlite3.Row | None:
        """The brief's newest revision held (the look-up by brief), or None."""
        return conn.execute(
            f"{_PUBLICATION} WHERE p.brief_id = ? ORDER BY p.revision DESC, p.published_at DESC LIMIT 1", (brief_id,)
        ).fetchone()

    def retraction_by_key(self, conn: sqlite3.Connection, operation_key: str) -> sqlite3.Row | None:
        return conn.execute("SELECT * FROM retractions WHERE operation_key = ?", (operation_key,)).fetchone()

    def retractions(self, conn: sqlite3.Connection) -> list[dict[str, Any]]:
        rows = conn.execute(
            "SELECT operation_key, publication_id, brief_id, revision, reason, retracted_at FROM retractions"
            " ORDER BY retracted_at, operation_key"
        ).fetchall()
        return [dict(row) for row in rows]

    @staticmethod
    def _fence(conn: sqlite3.Connection, brief_id: str) -> tuple[int | None, int | None]:
        """(the newest revision published, the newest revision retracted) of the brief."""
        (published,) = conn.execute("SELECT MAX(revision) FROM publications WHERE brief_id = ?", (brief_id,)).fetchone()
        (retracted,) = conn.execute("SELECT MAX(revision) FROM retractions WHERE brief_id = ?", (brief_id,)).fetchone()
        return published, retracted

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
        with _immediate(conn):
            existing = self.by_key(conn, body["operation_key"])
            if existing is not None:
                if existing["payload_hash"] == body["payload_hash"]:
                    return 200, receipt(existing)
                return 422, {
                    "error": "idempotency_mismatch",
                    "detail": "this operation key was applied with a different payload hash",
                }
            if not fence_off:
                # A retracted revision fences like a published one: what was taken down stays down.
                current = max((value for value in self._fence(conn, body["brief_id"]) if value is not None), default=0)
                if current >= body["revision"]:
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
        return 201, receipt(_inserted(row, publication_id))

    def retract(
        self, conn: sqlite3.Connection, publication_id: str, body: dict[str, Any]
    ) -> tuple[int, dict[str, Any]]:
        """Apply one retraction request in one BEGIN IMMEDIATE transaction; (status, response body).

        The key is re-checked inside the transaction (at most one application per key). Same key with
        another brief, revision or reason is 422. The named revision must be the newest the brief holds:
        a newer one is 409 stale_revision (the caller decides about it), one never published is 400.
        """
        with _immediate(conn):
            existing = self.retraction_by_key(conn, body["operation_key"])
            if existing is not None:
                return retraction_replay(existing, publication_id, body)
            publication = self.by_id(conn, publication_id)
            if publication is None:
                return 404, {"error": "not_found"}
            if publication["brief_id"] != body["brief_id"]:
                return 400, {"error": "invalid", "detail": f"publication {publication_id} is not of {body['brief_id']}"}
            published, _ = self._fence(conn, body["brief_id"])
            current = published if published is not None else publication["revision"]
            if current > body["revision"]:
                return 409, {"error": "stale_revision", "current_revision": current}
            if current < body["revision"]:
                return 400, {
                    "error": "invalid",
                    "detail": f"revision {body['revision']} of {body['brief_id']} was never published here",
                }
            conn.execute(
                "INSERT INTO retractions (operation_key, publication_id, brief_id, revision, reason, retracted_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (body["operation_key"], publication_id, body["brief_id"], body["revision"], body["reason"], _now()),
            )
            row = self.retraction_by_key(conn, body["operation_key"])
        return 201, retraction_receipt(_inserted(row, body["operation_key"]))
