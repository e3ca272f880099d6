"""Desks and their approval policies: every existing brief goes to the default desk, whose policy (one
approval, no required group) is the single approver it had."""

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


def existing_briefs_go_to_the_default_desk(apps, schema_editor):
    Desk = apps.get_model("publishing", "Desk")
    Brief = apps.get_model("publishing", "Brief")
    desk = Desk.objects.create(slug="general", name="General", is_default=True, approvals_required=1)
    Brief.objects.update(desk=desk)


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("publishing", "0015_webhooks"),
    ]

    operations = [
        migrations.CreateModel(
            name="Desk",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("slug", models.SlugField(unique=True)),
                ("name", models.CharField(max_length=100, unique=True)),
                (
                    "approvals_required",
                    models.PositiveSmallIntegerField(
                        default=1, help_text="Approvals from distinct approvers a revision needs (1 to 10)."
                    ),
                ),
                (
                    "is_default",
                    models.BooleanField(default=False, help_text="New briefs go to the default desk."),
                ),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("updated_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "required_groups",
                    models.ManyToManyField(
                        blank=True,
                        help_text="Groups each of which must approve a revision (one approval from a member of each).",
                        related_name="+",
                        to="auth.group",
                    ),
                ),
            ],
            options={
                "ordering": ["name"],
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(("approvals_required__gte", 1), ("approvals_required__lte", 10)),
                        name="desk_approvals_required_range",
                    ),
                    models.UniqueConstraint(
                        condition=models.Q(("is_default", True)), fields=("is_default",), name="desk_one_default"
                    ),
                ],
            },
        ),
        migrations.AddField(
            model_name="brief",
            name="legal_review",
            field=models.BooleanField(
                default=False, help_text="Flagged as needing legal review: Legal must approve; only Legal lifts it."
            ),
        ),
        migrations.AddField(
            model_name="brief",
            name="desk",
            field=models.ForeignKey(
                null=True, on_delete=django.db.models.deletion.PROTECT, related_name="briefs", to="publishing.desk"
            ),
        ),
        migrations.RunPython(existing_briefs_go_to_the_default_desk, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="brief",
            name="desk",
            field=models.ForeignKey(
                help_text="Its section; its policy says who approves.",
                on_delete=django.db.models.deletion.PROTECT,
                related_name="briefs",
                to="publishing.desk",
            ),
        ),
    ]
