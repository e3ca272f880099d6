"""Channels: the primary channel `web` (the GALLEY_TARGET_* / GALLEY_WORDPRESS_* settings' target), every
brief going to it, every publication and every publication operation recorded on it. Keys are not
rewritten: the primary channel's keys are the unextended ones."""

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models

PRIMARY = "web"
PUBLICATION_KINDS = ["publish", "verify", "republish", "drift_check"]


def primary_channel(apps, schema_editor):
    Channel = apps.get_model("publishing", "Channel")
    Brief = apps.get_model("publishing", "Brief")
    Publication = apps.get_model("publishing", "Publication")
    Operation = apps.get_model("workers", "Operation")
    web = Channel.objects.create(slug=PRIMARY, name="Website", from_settings=True, is_default=True, enabled=True)
    Through = Brief.channels.through
    Through.objects.bulk_create(
        [Through(brief_id=brief_id, channel_id=web.id) for brief_id in Brief.objects.values_list("id", flat=True)],
        batch_size=5000,
    )
    Publication.objects.update(channel=web)
    Operation.objects.filter(kind__in=PUBLICATION_KINDS, channel="").update(channel=PRIMARY)


class Migration(migrations.Migration):
    dependencies = [
        ("publishing", "0013_standfirst_step"),
        ("workers", "0011_operation_channel"),
    ]

    operations = [
        migrations.CreateModel(
            name="Channel",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                (
                    "slug",
                    models.SlugField(help_text="Part of every operation key on it; never changes.", unique=True),
                ),
                ("name", models.CharField(max_length=100)),
                (
                    "kind",
                    models.CharField(
                        choices=[
                            ("reference", "Target protocol (reference or any service speaking it)"),
                            ("wordpress", "WordPress with the companion plugin"),
                        ],
                        default="reference",
                        max_length=16,
                    ),
                ),
                ("base_url", models.URLField(blank=True, max_length=500)),
                (
                    "username",
                    models.CharField(
                        blank=True, help_text="WordPress: the user of the application password.", max_length=150
                    ),
                ),
                ("secret_sealed", models.TextField(blank=True, editable=False)),
                ("enabled", models.BooleanField(default=True)),
                ("is_default", models.BooleanField(default=False, help_text="New briefs go to the default channels.")),
                (
                    "rate_per_second",
                    models.PositiveIntegerField(
                        blank=True,
                        help_text="Sends per second across every worker on every host; empty: no limit.",
                        null=True,
                    ),
                ),
                ("from_settings", models.BooleanField(default=False, editable=False)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("updated_at", models.DateTimeField(default=django.utils.timezone.now)),
            ],
            options={
                "ordering": ["-from_settings", "slug"],
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(("slug__regex", "^[a-z0-9][a-z0-9-]*$")), name="channel_slug_form"
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("kind__in", ["reference", "wordpress"])), name="channel_kind_valid"
                    ),
                    models.UniqueConstraint(
                        condition=models.Q(("from_settings", True)),
                        fields=("from_settings",),
                        name="channel_one_from_settings",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            ("rate_per_second__isnull", True), ("rate_per_second__gte", 1), _connector="OR"
                        ),
                        name="channel_rate_positive",
                    ),
                ],
            },
        ),
        migrations.AddField(
            model_name="brief",
            name="channels",
            field=models.ManyToManyField(
                blank=True,
                help_text="Where an approval of it publishes (the default channels).",
                related_name="briefs",
                to="publishing.channel",
            ),
        ),
        migrations.AlterField(
            model_name="brief",
            name="published_revision_number",
            field=models.PositiveIntegerField(
                blank=True, help_text="Highest revision verified on any channel; only ever grows.", null=True
            ),
        ),
        migrations.AlterField(
            model_name="publication",
            name="revision",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.PROTECT, related_name="publications", to="publishing.revision"
            ),
        ),
        migrations.AddField(
            model_name="publication",
            name="channel",
            field=models.ForeignKey(
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="publications",
                to="publishing.channel",
            ),
        ),
        migrations.RunPython(primary_channel, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="publication",
            name="channel",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.PROTECT, related_name="publications", to="publishing.channel"
            ),
        ),
        migrations.AddConstraint(
            model_name="publication",
            constraint=models.UniqueConstraint(
                fields=("revision", "channel"), name="publication_one_per_revision_channel"
            ),
        ),
    ]
