"""The naive pipeline: the same job as Galley's publish and verify, written as a user of a task queue would
write it, for the rows "the same job, measured" (throughput.py) in django-q2 and in Procrastinate.

It is a Django app of the bench alone (djangoq_settings.py installs it): one unmanaged model, whose table
the bench creates with raw SQL (CREATE_TABLE below) in the database each peer's Django uses, so Galley
carries no migration for it. The task itself is pipeline.publish.
"""

TABLE = "bench_naive_publication"
# Created by the bench (throughput.py) in each database a naive pipeline writes to; no migration.
CREATE_TABLE = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
    id bigserial PRIMARY KEY,
    brief_id text NOT NULL,
    revision integer NOT NULL,
    payload_hash text NOT NULL,
    external_id text NOT NULL,
    permalink text NOT NULL,
    created_at timestamptz NOT NULL
)
"""
