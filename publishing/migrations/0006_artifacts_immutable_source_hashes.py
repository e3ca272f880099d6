from __future__ import annotations

from django.db import migrations

from publishing.hashing import source_hash

FORWARD = """
CREATE TRIGGER step_artifact_immutable
    BEFORE UPDATE OR DELETE ON publishing_stepartifact
    FOR EACH ROW EXECUTE FUNCTION galley_refuse_change();
"""
BACKWARD = "DROP TRIGGER step_artifact_immutable ON publishing_stepartifact;"


def hash_existing_sources(apps, schema_editor):  # type: ignore[no-untyped-def]
    Brief = apps.get_model("publishing", "Brief")
    for brief in Brief.objects.filter(source_hash="").only("id", "source_material"):
        Brief.objects.filter(id=brief.id).update(source_hash=source_hash(brief.source_material))


class Migration(migrations.Migration):
    dependencies = [("publishing", "0005_summary_pipeline")]
    operations = [
        migrations.RunSQL(FORWARD, BACKWARD),
        migrations.RunPython(hash_existing_sources, migrations.RunPython.noop),
    ]
