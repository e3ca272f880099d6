"""Schedules (docs/schedules.md): the time T and zone an approval publishes its revision at, one per completion.
A schedule is never deleted, and once cancelled it is final: the trigger refuses any later change."""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models

GUARDS = """
CREATE FUNCTION publication_schedule_final() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'a publication schedule is never deleted (docs/schedules.md)';
    END IF;
    IF OLD.cancelled_at IS NOT NULL THEN
        RAISE EXCEPTION 'publication schedule % was cancelled: it is final (docs/schedules.md)', OLD.id;
    END IF;
    IF NEW.completion_id <> OLD.completion_id OR NEW.created_at <> OLD.created_at THEN
        RAISE EXCEPTION 'a publication schedule stays bound to its completion (docs/schedules.md)';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER publication_schedule_final
    BEFORE UPDATE OR DELETE ON approvals_publicationschedule
    FOR EACH ROW EXECUTE FUNCTION publication_schedule_final();
"""

UNGUARDS = """
DROP TRIGGER publication_schedule_final ON approvals_publicationschedule;
DROP FUNCTION publication_schedule_final();
"""


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0006_approval_policies"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="PublicationSchedule",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("publish_at", models.DateTimeField(help_text="T in UTC: no channel receives the revision before it.")),
                ("zone", models.CharField(help_text="The IANA zone T was given in, and is shown in.", max_length=64)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("updated_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("cancelled_at", models.DateTimeField(blank=True, null=True)),
                ("cancel_reason", models.TextField(blank=True)),
                (
                    "cancelled_by",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "completion",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="schedule",
                        to="approvals.approvalcompletion",
                    ),
                ),
            ],
            options={
                "ordering": ["-created_at", "-id"],
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(("zone", ""), _negated=True), name="publication_schedule_zone_not_empty"
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            models.Q(
                                ("cancel_reason", ""), ("cancelled_at__isnull", True), ("cancelled_by__isnull", True)
                            ),
                            models.Q(
                                ("cancelled_at__isnull", False),
                                ("cancelled_by__isnull", False),
                                models.Q(("cancel_reason", ""), _negated=True),
                            ),
                            _connector="OR",
                        ),
                        name="publication_schedule_cancel_complete",
                    ),
                ],
            },
        ),
        migrations.RunSQL(GUARDS, UNGUARDS),
    ]
