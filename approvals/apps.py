from __future__ import annotations

from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    name = "approvals"
    verbose_name = "Approvals"

    def ready(self) -> None:
        # Imported here: models cannot be imported while the app registry is still loading.
        from approvals.handlers import handle_notification_email
        from approvals.notifications import (
            NOTIFICATION_EMAIL,
            do_notify_legal_review_flagged,
            do_notify_publish_problem,
            do_notify_published,
            do_notify_submitted,
        )
        from approvals.selectors import get_valid_approval
        from publishing.announcements import (
            register_legal_review_flagged,
            register_published,
            register_revision_submitted,
        )
        from publishing.approval import register_valid_approval
        from workers.registry import register, register_operator_needed

        register(NOTIFICATION_EMAIL, handle_notification_email)
        # Publishing and the workers announce their events; approvals tells the people concerned,
        # in the transaction of the event.
        register_revision_submitted(do_notify_submitted)
        register_legal_review_flagged(do_notify_legal_review_flagged)
        register_published(do_notify_published)
        register_operator_needed(do_notify_publish_problem)
        register_valid_approval(get_valid_approval)
