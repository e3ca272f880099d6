"""Approval policies: each approval records its approver's groups, and the approval that completes a
revision's policy records the policy that applied (ApprovalCompletion). Every revision approved so far
was completed by its first approval under the one-approval policy of the default desk."""

import django.contrib.postgres.fields
import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models

# approver_groups keeps its default in the database too, so a row written by SQL that does not name it
# (a bulk import, a benchmark's fixture) records no group rather than failing.
GUARDS = """
ALTER TABLE approvals_approval ALTER COLUMN approver_groups SET DEFAULT '{}';
ALTER TABLE approvals_approval ADD CONSTRAINT approval_id_revision_unique UNIQUE (id, revision_id);
ALTER TABLE approvals_approvalcompletion
    ADD CONSTRAINT approval_completion_hash_is_revision_hash
    FOREIGN KEY (revision_id, payload_hash) REFERENCES publishing_revision (id, payload_hash),
    ADD CONSTRAINT approval_completion_approval_of_revision
    FOREIGN KEY (approval_id, revision_id) REFERENCES approvals_approval (id, revision_id);
CREATE TRIGGER approval_completion_append_only
    BEFORE UPDATE OR DELETE ON approvals_approvalcompletion
    FOR EACH ROW EXECUTE FUNCTION galley_refuse_change();
"""

UNGUARDS = """
ALTER TABLE approvals_approval ALTER COLUMN approver_groups DROP DEFAULT;
DROP TRIGGER approval_completion_append_only ON approvals_approvalcompletion;
ALTER TABLE approvals_approvalcompletion
    DROP CONSTRAINT approval_completion_approval_of_revision,
    DROP CONSTRAINT approval_completion_hash_is_revision_hash;
ALTER TABLE approvals_approval DROP CONSTRAINT approval_id_revision_unique;
"""

# The first approval of each approved revision completed it, under the default desk's policy.
EXISTING_COMPLETIONS = """
INSERT INTO approvals_approvalcompletion
    (revision_id, payload_hash, approval_id, desk_id, approvals_required, required_groups, created_at)
SELECT DISTINCT ON (a.revision_id) a.revision_id, a.payload_hash, a.id,
       (SELECT id FROM publishing_desk WHERE is_default), 1, '{}', a.created_at
FROM approvals_approval a
WHERE a.decision = 'approved'
ORDER BY a.revision_id, a.created_at, a.id;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0005_approval_channels"),
        ("publishing", "0016_desks"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="ApprovalCompletion",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("payload_hash", models.CharField(max_length=64)),
                ("approvals_required", models.PositiveSmallIntegerField()),
                (
                    "required_groups",
                    django.contrib.postgres.fields.ArrayField(
                        base_field=models.CharField(max_length=150), blank=True, default=list, size=None
                    ),
                ),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
            ],
            options={
                "ordering": ["-created_at", "-id"],
            },
        ),
        migrations.RemoveConstraint(
            model_name="notification",
            name="notification_event_valid",
        ),
        migrations.AddField(
            model_name="approval",
            name="approver_groups",
            field=django.contrib.postgres.fields.ArrayField(
                base_field=models.CharField(max_length=150),
                blank=True,
                default=list,
                help_text="The approver's groups when they decided.",
                size=None,
            ),
        ),
        migrations.AlterField(
            model_name="notification",
            name="event",
            field=models.CharField(
                choices=[
                    ("submitted", "Submitted for review"),
                    ("assigned", "Assigned for review"),
                    ("approved", "Approved"),
                    ("changes_requested", "Changes requested"),
                    ("review_needed", "Your approval is needed"),
                    ("commented", "Commented"),
                    ("published", "Published"),
                    ("publish_failed", "Publishing needs an operator"),
                ],
                max_length=32,
            ),
        ),
        migrations.AddConstraint(
            model_name="notification",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    (
                        "event__in",
                        [
                            "submitted",
                            "assigned",
                            "approved",
                            "changes_requested",
                            "review_needed",
                            "commented",
                            "published",
                            "publish_failed",
                        ],
                    )
                ),
                name="notification_event_valid",
            ),
        ),
        migrations.AddField(
            model_name="approvalcompletion",
            name="approval",
            field=models.OneToOneField(
                on_delete=django.db.models.deletion.PROTECT, related_name="completion", to="approvals.approval"
            ),
        ),
        migrations.AddField(
            model_name="approvalcompletion",
            name="desk",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.PROTECT, related_name="+", to="publishing.desk"
            ),
        ),
        migrations.AddField(
            model_name="approvalcompletion",
            name="revision",
            field=models.OneToOneField(
                on_delete=django.db.models.deletion.PROTECT, related_name="completion", to="publishing.revision"
            ),
        ),
        migrations.AddConstraint(
            model_name="approvalcompletion",
            constraint=models.CheckConstraint(
                condition=models.Q(("approvals_required__gte", 1)), name="approval_completion_requires_one"
            ),
        ),
        migrations.RunSQL(GUARDS, UNGUARDS),
        migrations.RunSQL(EXISTING_COMPLETIONS, migrations.RunSQL.noop),
    ]
