"""API tokens: made for a user (the secret shown once), stored as the sha256 of the secret."""

from __future__ import annotations

import hashlib
import secrets

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone
from django.views.decorators.debug import sensitive_variables

from publishing.models import ApiToken
from publishing.redaction import TOKEN_PREFIX, token_prefix
from publishing.roles import AnyUser, Role, require_role
from workers.audit import record_audit_event


def hash_token(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


@transaction.atomic(savepoint=False)
def do_create_api_token(user: User, *, name: str, acting_user: User | None) -> tuple[ApiToken, str]:
    """A new token for `user`: returns the row and the secret, which is stored nowhere (only its hash)."""
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(user=user, name=name, token_hash=hash_token(secret), prefix=token_prefix(secret))
    record_audit_event(
        acting_user=acting_user,
        event_type="api_token.created",
        subject_type="user",
        subject_id=user.get_username(),
        new_state={"token": token.prefix, "name": name},
    )
    return token, secret


@transaction.atomic(savepoint=False)
def check_revoke_api_token(token: ApiToken, *, acting_user: AnyUser) -> bool:
    """Revoke the token (Operators): from now on it authenticates nothing (a 401 from the API).

    Idempotent: a token already revoked stays as it was, keeps its first revocation time, and no
    new audit record is written; returns whether this call revoked it.
    """
    operator = require_role(acting_user, Role.OPERATOR, to="revoke API tokens")
    locked = ApiToken.objects.select_for_update().select_related("user").get(pk=token.pk)
    if locked.revoked_at is not None:
        return False
    locked.revoked_at = timezone.now()
    locked.save(update_fields=["revoked_at"])
    record_audit_event(
        acting_user=operator,
        event_type="api_token.revoked",
        subject_type="user",
        subject_id=locked.user.get_username(),
        old_state={"token": locked.prefix, "name": locked.name, "revoked": False},
        new_state={"token": locked.prefix, "name": locked.name, "revoked": True},
    )
    return True


@sensitive_variables("secret")
def get_token_user(secret: str) -> User | None:
    """The active user a live token belongs to, or None (unknown, revoked, or user inactive)."""
    if not secret.startswith(TOKEN_PREFIX):
        return None
    token = (
        ApiToken.objects.select_related("user")
        .filter(token_hash=hash_token(secret), revoked_at__isnull=True, user__is_active=True)
        .first()
    )
    return token.user if token is not None else None
