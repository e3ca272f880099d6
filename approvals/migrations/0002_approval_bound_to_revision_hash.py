from __future__ import annotations

from django.db import migrations

# The approval's hash must be its revision's: a composite foreign key onto the revision's
# unique (id, payload_hash), checked immediately (not deferred), so even raw SQL cannot insert
# an approval of a hash the revision does not have.
FORWARD = """
ALTER TABLE approvals_approval
    ADD CONSTRAINT approval_hash_is_revision_hash
    FOREIGN KEY (revision_id, payload_hash) REFERENCES publishing_revision (id, payload_hash);

CREATE TRIGGER approval_append_only
    BEFORE UPDATE OR DELETE ON approvals_approval
    FOR EACH ROW EXECUTE FUNCTION galley_refuse_change();

CREATE FUNCTION approval_refuse_self_approval() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.decision = 'approved' AND EXISTS (
        SELECT 1 FROM publishing_revision WHERE id = NEW.revision_id AND author_id = NEW.approver_id
    ) THEN
        RAISE EXCEPTION 'approver % authored revision %: self-approval refused', NEW.approver_id, NEW.revision_id
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER approval_not_by_author
    BEFORE INSERT ON approvals_approval
    FOR EACH ROW EXECUTE FUNCTION approval_refuse_self_approval();
"""

BACKWARD = """
DROP TRIGGER approval_not_by_author ON approvals_approval;
DROP FUNCTION approval_refuse_self_approval();
DROP TRIGGER approval_append_only ON approvals_approval;
ALTER TABLE approvals_approval DROP CONSTRAINT approval_hash_is_revision_hash;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0001_initial"),
        ("publishing", "0002_revision_immutable_brief_numbers"),
    ]
    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
