"""The brief list's indexes: its order, its status filter and its searched columns, so a page's
ids come from an index alone (publishing.selectors.list_briefs). Replaces (status, -created_at),
which broke ties on nothing and made every search and skipped row read the table.

pg_trgm is not available in the embedded PostgreSQL, so the title search (icontains) stays a
filter over these narrow indexes rather than a trigram index.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("publishing", "0008_brief_form_token")]

    operations = [
        migrations.RemoveIndex(model_name="brief", name="brief_status_created_idx"),
        migrations.AddIndex(
            model_name="brief",
            index=models.Index(fields=["-created_at", "-id"], include=("title", "public_id"), name="brief_created_idx"),
        ),
        migrations.AddIndex(
            model_name="brief",
            index=models.Index(
                fields=["status", "-created_at", "-id"], include=("title", "public_id"), name="brief_status_created_idx"
            ),
        ),
    ]
