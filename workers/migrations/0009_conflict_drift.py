from django.db import migrations, models


class Migration(migrations.Migration):
    """A conflict of a new kind: drift, the target shows other live content than the approved
    revision it holds (an edit in wp-admin, say), found by a verification or the periodic check."""

    dependencies = [("workers", "0008_attempt_due_at_status_labels")]

    operations = [
        migrations.AddField(
            model_name="conflict",
            name="accepted_payload_hash",
            field=models.CharField(
                blank=True,
                help_text="A drift an operator accepted (or adopted): the hash of what the target shows, which "
                "later checks of the same revision take as expected.",
                max_length=64,
            ),
        ),
        migrations.AlterField(
            model_name="conflict",
            name="kind",
            field=models.CharField(
                choices=[
                    ("key_conflict", "Key conflict: the target holds this key with another payload"),
                    ("stale_revision", "Stale revision: the target holds a revision Galley did not publish"),
                    ("verification_mismatch", "Verification mismatch: the read-back shows other content"),
                    ("drift", "Drift: the site no longer shows the approved revision"),
                ],
                default="key_conflict",
                max_length=32,
            ),
        ),
    ]
