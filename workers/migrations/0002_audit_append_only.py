from __future__ import annotations

from django.db import migrations

# One trigger function for every append-only or immutable table (audit events, revisions,
# approvals): any UPDATE or DELETE of a row fails, whoever sends it, ORM or raw SQL.
CREATE_FUNCTION = """
CREATE FUNCTION galley_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% rows are immutable: % refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'integrity_constraint_violation';
END;
$$;
CREATE TRIGGER auditevent_append_only
    BEFORE UPDATE OR DELETE ON workers_auditevent
    FOR EACH ROW EXECUTE FUNCTION galley_refuse_change();
"""

DROP_FUNCTION = """
DROP TRIGGER auditevent_append_only ON workers_auditevent;
DROP FUNCTION galley_refuse_change();
"""


class Migration(migrations.Migration):
    dependencies = [("workers", "0001_initial")]
    operations = [migrations.RunSQL(CREATE_FUNCTION, DROP_FUNCTION)]
