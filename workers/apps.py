from __future__ import annotations

from django.apps import AppConfig
from django.db.models.signals import post_migrate


class WorkersConfig(AppConfig):
    name = "workers"
    verbose_name = "Durable machinery"

    def ready(self) -> None:
        post_migrate.connect(_ensure_schedules, sender=self, dispatch_uid="galley_ensure_schedules")


def _ensure_schedules(sender: AppConfig, **kwargs: object) -> None:
    # django-q2's models cannot be imported while the app registry is still loading.
    from workers.schedules import ensure_schedules

    ensure_schedules(using=str(kwargs.get("using", "default")))
