from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("workers", "0010_operation_subject_version")]

    operations = [
        migrations.AddField(
            model_name="operation",
            name="channel",
            field=models.CharField(
                blank=True,
                default="",
                help_text="The destination the operation acts on (a publishing channel's slug), whose rate limit and "
                "pauses it shares with every operation on it; empty when it has none.",
                max_length=50,
            ),
        ),
    ]
