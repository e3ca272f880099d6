from __future__ import annotations

from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    name = "approvals"
    verbose_name = "Approvals"

    def ready(self) -> None:
        # Imported here: models cannot be imported while the app registry is still loading.
        from approvals.notifications import do_notify_publish_problem
        from approvals.selectors import get_valid_approval
        from publishing.approval import register_valid_approval
        from workers.registry import register_operator_needed

        register_operator_needed(do_notify_publish_problem)
        register_valid_approval(get_valid_approval)
