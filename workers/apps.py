from __future__ import annotations

from django.apps import AppConfig
from django.db.models.signals import post_migrate


class WorkersConfig(AppConfig):
    name = "workers"
    verbose_name = "Durable machinery"

    def ready(self) -> None:
        post_migrate.connect(_ensure_schedules, sender=self, dispatch_uid="galley_ensure_schedules")
        # Sent in each django-q2 worker process as it starts: there it starts the drain service.
        from django_q.signals import post_spawn

        post_spawn.connect(_start_service, dispatch_uid="galley_start_service")


def _ensure_schedules(sender: AppConfig, **kwargs: object) -> None:
    # django-q2's models cannot be imported while the app registry is still loading.
    from workers.schedules import ensure_schedules

    ensure_schedules(using=str(kwargs.get("using", "default")))


def _start_service(**kwargs: object) -> None:
    from workers.tasks import start_service

    start_service()
