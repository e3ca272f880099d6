from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    """A conflict is no longer only a key conflict: a stale revision at the target and a
    verification mismatch are conflicts too, and each records what the target held."""

    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ("workers", "0006_operation_waits"),
    ]

    operations = [
        migrations.RenameModel("KeyConflict", "Conflict"),
        migrations.AddField(
            model_name="conflict",
            name="kind",
            field=models.CharField(
                choices=[
                    ("key_conflict", "Key conflict: the target holds this key with another payload"),
                    ("stale_revision", "Stale revision: the target holds a revision Galley did not publish"),
                    ("verification_mismatch", "Verification mismatch: the read-back shows other content"),
                ],
                default="key_conflict",
                max_length=32,
            ),
        ),
        migrations.AddField(
            model_name="conflict",
            name="target_state",
            field=models.JSONField(
                blank=True,
                help_text="What the target held (id, revision, payload hash, permalink), if known.",
                null=True,
            ),
        ),
        migrations.AlterField(
            model_name="conflict",
            name="existing_payload_hash",
            field=models.CharField(help_text="The payload hash Galley intended.", max_length=64),
        ),
        migrations.AlterField(
            model_name="conflict",
            name="source",
            field=models.CharField(
                choices=[("enqueue", "Enqueued again with another payload"), ("target", "Found at the target")],
                max_length=16,
            ),
        ),
        migrations.AlterField(
            model_name="attempt",
            name="outcome",
            field=models.CharField(
                blank=True,
                choices=[
                    ("succeeded", "Succeeded"),
                    ("retry", "Will retry"),
                    ("dead", "Dead"),
                    ("conflict", "Conflict"),
                    ("superseded", "Superseded"),
                    ("lease_lost", "Lease lost (wrote nothing)"),
                ],
                max_length=16,
            ),
        ),
        migrations.AlterField(
            model_name="operation",
            name="status",
            field=models.CharField(
                choices=[
                    ("pending", "Pending"),
                    ("running", "Running"),
                    ("succeeded", "Succeeded"),
                    ("retry_wait", "Waiting to retry"),
                    ("dead", "Dead (needs an operator)"),
                    ("conflict", "Conflict (needs an operator)"),
                    ("superseded", "Superseded"),
                    ("cancelled", "Cancelled"),
                ],
                default="pending",
                max_length=16,
            ),
        ),
    ]
