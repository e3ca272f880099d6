"""The channel set an approval froze: existing approvals went to the primary channel `web`, the only one
there was."""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models

APPEND_ONLY = """
CREATE TRIGGER approval_channel_append_only
    BEFORE UPDATE OR DELETE ON approvals_approvalchannel
    FOR EACH ROW EXECUTE FUNCTION galley_refuse_change();
"""


def existing_approvals_went_to_web(apps, schema_editor):
    Approval = apps.get_model("approvals", "Approval")
    ApprovalChannel = apps.get_model("approvals", "ApprovalChannel")
    Channel = apps.get_model("publishing", "Channel")
    web = Channel.objects.get(slug="web")
    ApprovalChannel.objects.bulk_create(
        [
            ApprovalChannel(approval_id=approval_id, channel_id=web.id)
            for approval_id in Approval.objects.filter(decision="approved").values_list("id", flat=True)
        ],
        batch_size=5000,
    )


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0004_coalesce"),
        ("publishing", "0014_channels"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="ApprovalChannel",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "added_by",
                    models.ForeignKey(
                        blank=True,
                        help_text="Who added the channel after the approval; empty for the approval's own set.",
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "approval",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="channel_rows",
                        to="approvals.approval",
                    ),
                ),
                (
                    "channel",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT, related_name="+", to="publishing.channel"
                    ),
                ),
            ],
            options={
                "ordering": ["approval_id", "id"],
                "constraints": [models.UniqueConstraint(fields=("approval", "channel"), name="approval_channel_once")],
            },
        ),
        migrations.RunPython(existing_approvals_went_to_web, migrations.RunPython.noop),
        migrations.RunSQL(APPEND_ONLY, "DROP TRIGGER approval_channel_append_only ON approvals_approvalchannel;"),
    ]
