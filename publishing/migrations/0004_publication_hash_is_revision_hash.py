from __future__ import annotations

from django.db import migrations

# The published hash is the revision's: a composite foreign key onto the revision's unique
# (id, payload_hash), checked immediately. Published revision numbers only grow.
FORWARD = """
ALTER TABLE publishing_publication
    ADD CONSTRAINT publication_hash_is_revision_hash
    FOREIGN KEY (revision_id, payload_hash) REFERENCES publishing_revision (id, payload_hash);

CREATE FUNCTION brief_published_revision_never_regresses() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.published_revision_number IS NOT NULL AND (
        NEW.published_revision_number IS NULL OR NEW.published_revision_number < OLD.published_revision_number
    ) THEN
        RAISE EXCEPTION 'brief %: published revision cannot go back from % to %',
            OLD.public_id, OLD.published_revision_number, NEW.published_revision_number
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER brief_published_revision_monotonic
    BEFORE UPDATE OF published_revision_number ON publishing_brief
    FOR EACH ROW EXECUTE FUNCTION brief_published_revision_never_regresses();
"""

BACKWARD = """
DROP TRIGGER brief_published_revision_monotonic ON publishing_brief;
DROP FUNCTION brief_published_revision_never_regresses();
ALTER TABLE publishing_publication DROP CONSTRAINT publication_hash_is_revision_hash;
"""


class Migration(migrations.Migration):
    dependencies = [("publishing", "0003_publications")]
    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
