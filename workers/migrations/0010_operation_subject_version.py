from django.db import migrations, models


class Migration(migrations.Migration):
    """The version of the subject an operation acts on (a brief's revision number) as a typed, indexed
    column, filled in for existing operations from the `revision` their arguments carry. The subject's
    index gains the kind and the version, for "a brief's older publishes"; its two leading columns serve
    what the old (subject_type, subject_id) index served."""

    dependencies = [("workers", "0009_conflict_drift")]

    operations = [
        migrations.AddField(
            model_name="operation",
            name="subject_version",
            field=models.PositiveIntegerField(
                blank=True,
                help_text="The version of the subject the operation acts on (a brief's revision number for a "
                "publish, verify, republish or drift check); empty when the subject has none.",
                null=True,
            ),
        ),
        # Status is untouched, so the transition trigger (0005) does not fire.
        migrations.RunSQL(
            "UPDATE workers_operation SET subject_version = (arguments ->> 'revision')::integer"
            " WHERE arguments ? 'revision'",
            reverse_sql=migrations.RunSQL.noop,
        ),
        migrations.RemoveIndex(model_name="operation", name="operation_subject_idx"),
        migrations.AddIndex(
            model_name="operation",
            index=models.Index(
                fields=["subject_type", "subject_id", "kind", "subject_version"], name="operation_subject_version_idx"
            ),
        ),
    ]
