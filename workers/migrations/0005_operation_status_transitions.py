from __future__ import annotations

from django.db import migrations

# workers.models.OPERATION_TRANSITIONS as of this migration, frozen (a migration must not change
# when the model module does). A test compares the trigger with the live table, so a change to
# the table without a new migration fails the suite.
ALLOWED = {
    "pending": ["running", "superseded", "cancelled", "dead"],
    "retry_wait": ["running", "superseded", "cancelled", "dead"],
    "running": ["succeeded", "retry_wait", "dead", "conflict", "superseded"],
    "dead": ["retry_wait", "cancelled"],
    "conflict": ["retry_wait", "cancelled"],
}

PAIRS = ", ".join(f"('{old}', '{new}')" for old, news in ALLOWED.items() for new in news)

FORWARD = f"""
CREATE FUNCTION operation_status_transition_allowed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (OLD.status, NEW.status) NOT IN ({PAIRS}) THEN
        RAISE EXCEPTION 'operation %: status cannot go from % to %', OLD.key, OLD.status, NEW.status
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER operation_status_transition
    BEFORE UPDATE OF status ON workers_operation
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION operation_status_transition_allowed();
"""

BACKWARD = """
DROP TRIGGER operation_status_transition ON workers_operation;
DROP FUNCTION operation_status_transition_allowed();
"""


class Migration(migrations.Migration):
    dependencies = [("workers", "0004_attempt_usage")]
    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
