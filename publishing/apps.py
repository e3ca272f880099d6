from __future__ import annotations

from django.apps import AppConfig
from django.db.models.signals import post_migrate


class PublishingConfig(AppConfig):
    name = "publishing"
    verbose_name = "Publishing"

    def ready(self) -> None:
        # Handlers import models, which the app registry allows only once ready() runs.
        from publishing.actions.webhooks import do_emit_publication_problem
        from publishing.clients.target import check_configured_target
        from publishing.handlers.overdue import handle_schedule_overdue
        from publishing.handlers.publications import handle_drift_check, handle_publish, handle_republish, handle_verify
        from publishing.handlers.retractions import handle_retract
        from publishing.handlers.summaries import handle_summary_step
        from publishing.handlers.webhooks import handle_webhook
        from publishing.identities import (
            DRIFT_CHECK,
            PUBLISH,
            REPUBLISH,
            RETRACT,
            SCHEDULE_OVERDUE,
            SUMMARY_STEP,
            VERIFY,
            WEBHOOK,
        )
        from workers.registry import register, register_operator_needed, register_startup_check

        register(PUBLISH, handle_publish)
        register(VERIFY, handle_verify)
        register(DRIFT_CHECK, handle_drift_check)
        register(REPUBLISH, handle_republish)
        register(RETRACT, handle_retract)
        register(SUMMARY_STEP, handle_summary_step)
        register(WEBHOOK, handle_webhook)
        register(SCHEDULE_OVERDUE, handle_schedule_overdue)
        # A publication that comes to need an operator is a webhook event, in the transaction recording it.
        register_operator_needed(do_emit_publication_problem)
        register_startup_check("publishing target", check_configured_target)
        # Groups are granted permission rows, which Django creates after each app migrates;
        # the handler is idempotent, so running it after every app is harmless.
        post_migrate.connect(_ensure_role_groups, dispatch_uid="galley_ensure_role_groups")
        # The primary channel is data every publication names (migration 0014 makes it); a flushed
        # database (the tests' TransactionTestCase) gets it back with the rest of post_migrate's rows.
        post_migrate.connect(_ensure_primary_channel, sender=self, dispatch_uid="galley_ensure_primary_channel")
        # Every brief belongs to a desk: the default one (migration 0016) comes back the same way.
        post_migrate.connect(_ensure_default_desk, sender=self, dispatch_uid="galley_ensure_default_desk")


def _ensure_role_groups(sender: AppConfig, **kwargs: object) -> None:
    # roles imports auth's models, which cannot be imported while the app registry is still loading.
    from publishing.roles import ensure_role_groups

    ensure_role_groups(using=str(kwargs.get("using", "default")))


def _ensure_primary_channel(sender: AppConfig, **kwargs: object) -> None:
    from publishing.actions.channels import ensure_primary_channel

    ensure_primary_channel(using=str(kwargs.get("using", "default")))


def _ensure_default_desk(sender: AppConfig, **kwargs: object) -> None:
    from publishing.actions.desks import ensure_default_desk

    ensure_default_desk(using=str(kwargs.get("using", "default")))
