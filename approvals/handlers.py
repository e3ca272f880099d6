"""The `notification_email` handler: one notification's email, sent by a worker after the event
committed (approvals.notifications wrote the intent with the notification). A worker entry point,
thin like a view (as publishing.handlers); registered in approvals.apps.

A notification asking for a review ("submitted for review", "your approval is needed") whose revision
a newer one superseded before the email went out is not sent: the operation ends superseded, on record
with why (a submission's notification itself took the newer revision, approvals.notifications, and its
own email tells that one).

Idempotent: a notification whose emailed_at is set is never sent again, and emailed_at is set in
the fenced finalize, so a second run after a success sends nothing. The one window left is a
crash (or a lost lease) between the backend's acceptance and the finalize: then the email goes
out again on the retry, as any at-least-once delivery would.
"""

from __future__ import annotations

import smtplib

from django.conf import settings
from django.core.mail import send_mail

from approvals.notifications import do_record_notification_emailed
from approvals.selectors import get_notification_for_email, get_superseding_revision_number
from workers.actions.claims import renew_lease
from workers.errors import FailureKind, OperationFailed, Superseded
from workers.registry import ClaimedOperation, Success


def handle_notification_email(claimed: ClaimedOperation) -> Success:
    notification = get_notification_for_email(int(claimed.subject_id))
    if notification.emailed_at is not None:
        return Success(result={"sent": False, "emailed_at": notification.emailed_at.isoformat()})
    address = notification.recipient.email
    if not address:
        raise Superseded(f"{notification.recipient} has no email address any more")
    newer = get_superseding_revision_number(notification)
    if newer is not None:
        raise Superseded(
            f"revision {notification.revision_number} was superseded by revision {newer} before this email went out"
        )
    # Fence check immediately before the side effect: a worker that lost its lease stops here.
    renew_lease(claimed)
    site = str(settings.GALLEY_PUBLIC_URL or "").rstrip("/")
    link = f"{site}{notification.get_absolute_url()}"
    try:
        send_mail(
            subject=f"[Galley] {notification.get_event_display()}: {notification.brief.public_id}",
            message=f"{notification.message}\n\n{link}\n",
            from_email=settings.DEFAULT_FROM_EMAIL,
            recipient_list=[address],
        )
    except smtplib.SMTPRecipientsRefused as exc:
        raise OperationFailed(FailureKind.INVALID, f"the mail server refused {address}: {exc}") from exc
    except (smtplib.SMTPException, OSError) as exc:
        # Whether the server took the message is unknown: retried with backoff, like a timeout.
        raise OperationFailed(FailureKind.CONNECTION, f"sending the email failed: {exc}") from exc
    return Success(result={"sent": True}, finalize=lambda: do_record_notification_emailed(notification))
