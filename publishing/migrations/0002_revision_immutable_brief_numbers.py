from __future__ import annotations

from django.db import migrations

FORWARD = """
CREATE SEQUENCE publishing_brief_number_seq START 1;
CREATE TRIGGER revision_immutable
    BEFORE UPDATE OR DELETE ON publishing_revision
    FOR EACH ROW EXECUTE FUNCTION galley_refuse_change();
"""

BACKWARD = """
DROP TRIGGER revision_immutable ON publishing_revision;
DROP SEQUENCE publishing_brief_number_seq;
"""


class Migration(migrations.Migration):
    dependencies = [("publishing", "0001_initial"), ("workers", "0002_audit_append_only")]
    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
