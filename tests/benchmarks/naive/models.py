"""The naive pipeline's publication row: what it saves once a revision is published and read back."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from tests.benchmarks.naive import TABLE


class NaivePublication(models.Model):
    brief_id = models.TextField()
    revision = models.IntegerField()
    payload_hash = models.TextField()
    external_id = models.TextField()
    permalink = models.TextField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        app_label = "naive"
        db_table = TABLE
        managed = False

    def __str__(self) -> str:
        return f"{self.brief_id} revision {self.revision} at {self.permalink}"
