from __future__ import annotations

from django.apps import AppConfig
from django.db.models.signals import post_migrate


class PublishingConfig(AppConfig):
    name = "publishing"
    verbose_name = "Publishing"

    def ready(self) -> None:
        from publishing import delivery, pipeline
        from workers.registry import register

        register(delivery.PUBLISH, delivery.handle_publish)
        register(delivery.VERIFY, delivery.handle_verify)
        register(pipeline.SUMMARY_STEP, pipeline.handle_summary_step)
        # Groups are granted permission rows, which Django creates after each app migrates;
        # the handler is idempotent, so running it after every app is harmless.
        post_migrate.connect(_ensure_role_groups, dispatch_uid="galley_ensure_role_groups")


def _ensure_role_groups(sender: AppConfig, **kwargs: object) -> None:
    from publishing.actions import ensure_role_groups

    ensure_role_groups(using=str(kwargs.get("using", "default")))
