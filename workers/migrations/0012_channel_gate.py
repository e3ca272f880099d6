import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("workers", "0011_operation_channel")]

    operations = [
        migrations.CreateModel(
            name="ChannelGate",
            fields=[
                (
                    "channel",
                    models.CharField(
                        help_text="The channel's slug (Operation.channel).",
                        max_length=50,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                (
                    "rate_per_second",
                    models.PositiveIntegerField(
                        blank=True,
                        help_text="Sends per second across every worker on every host; empty: no limit.",
                        null=True,
                    ),
                ),
                (
                    "next_send_at",
                    models.DateTimeField(
                        default=django.utils.timezone.now, help_text="The earliest time the next send may start."
                    ),
                ),
                (
                    "next_return_at",
                    models.DateTimeField(
                        default=django.utils.timezone.now,
                        help_text="When the next operation turned away by the limit is told to come back.",
                    ),
                ),
                (
                    "paused_until",
                    models.DateTimeField(blank=True, help_text="The channel's last Retry-After, if later.", null=True),
                ),
                ("pause_reason", models.TextField(blank=True)),
                (
                    "waits",
                    models.PositiveBigIntegerField(
                        default=0, help_text="Sends held back by the rate limit or a pause."
                    ),
                ),
                (
                    "pauses",
                    models.PositiveBigIntegerField(
                        default=0, help_text="Answers with Retry-After that paused the channel."
                    ),
                ),
                ("updated_at", models.DateTimeField(default=django.utils.timezone.now)),
            ],
            options={
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(
                            ("rate_per_second__isnull", True), ("rate_per_second__gte", 1), _connector="OR"
                        ),
                        name="channel_gate_rate_positive",
                    )
                ],
            },
        ),
    ]
