from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand
from django.db import transaction

from publishing.actions.channels import do_save_channel
from publishing.actions.desks import do_save_desk
from publishing.credentials import SealedValueUnreadable, unseal
from publishing.models import Channel, ChannelKind, Desk
from publishing.roles import LEGAL_GROUP, Role, ensure_role_groups

# (username, role, staff, other groups): the Django admin at /admin/ lets in staff accounts only, so the demo
# operator, whose work is there, is staff; the others are not (docs/operations.md#admin). A second approver
# and a Legal reviewer make the Politics desk's policy (two approvals, one from Legal) walkable.
DEMO_USERS: list[tuple[str, Role, bool, tuple[str, ...]]] = [
    ("editor", Role.EDITOR, False, ()),
    ("approver", Role.APPROVER, False, ()),
    ("approver2", Role.APPROVER, False, ()),
    ("legal", Role.APPROVER, False, (LEGAL_GROUP,)),
    ("operator", Role.OPERATOR, True, ()),
]
# The demo's second desk, made once (an operator's later changes to it stay): docs/policies.md.
POLITICS_DESK = {"slug": "politics", "name": "Politics", "approvals_required": 2}
# Every demo user has an address on the reserved .localhost domain, so that `make run` shows the notification
# emails (printed by the console backend in the workers' output) without mailing anyone.
DEMO_EMAIL_DOMAIN = "galley.localhost"
# The demo's second channel (`make run` starts its reference target), so that an approval fans out at once.
PARTNER_FEED = "partner-feed"


class Command(BaseCommand):
    help = (
        "Create the demo users (editor, approver, approver2, legal, operator), each with an address "
        "at galley.localhost, and the desk Politics (two approvals, one from Legal), and print the "
        "credentials. With --partner-feed-url, also the default channel partner-feed there (docs/channels.md)."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--credentials-file",
            default=str(settings.VAR_DIR / "demo-credentials.json"),
            help="Where the generated passwords are kept between runs (never committed).",
        )
        parser.add_argument("--partner-feed-url", default="", help="The channel partner-feed's reference target.")
        parser.add_argument(
            "--partner-feed-token",
            default=os.environ.get("GALLEY_PARTNER_FEED_TOKEN", ""),
            help="Its bearer token (default: the environment's GALLEY_PARTNER_FEED_TOKEN, kept off the command line).",
        )

    def handle(
        self,
        *args: Any,
        credentials_file: str,
        partner_feed_url: str = "",
        partner_feed_token: str = "",
        **options: Any,
    ) -> None:
        path = Path(credentials_file)
        stored: dict[str, str] = json.loads(path.read_text()) if path.exists() else {}
        User = get_user_model()
        with transaction.atomic(durable=True):
            ensure_role_groups()
            for username, role, is_staff, groups in DEMO_USERS:
                password = stored.get(username) or f"{username}-{secrets.token_urlsafe(9)}"
                email = f"{username}@{DEMO_EMAIL_DOMAIN}"
                user, created = User.objects.get_or_create(
                    username=username, defaults={"is_staff": is_staff, "email": email}
                )
                if created or not user.check_password(password):
                    user.set_password(password)
                    user.save(update_fields=["password"])
                if not user.email:  # a demo user from before they had addresses; one set since is kept
                    user.email = email
                    user.save(update_fields=["email"])
                if user.is_staff != is_staff:  # e.g. an operator made before it was staff: kept as the table says
                    user.is_staff = is_staff
                    user.save(update_fields=["is_staff"])
                user.groups.add(*Group.objects.filter(name__in=(role.value, *groups)))
                stored[username] = password
            if not Desk.objects.filter(slug=POLITICS_DESK["slug"]).exists():
                legal = list(Group.objects.filter(name=LEGAL_GROUP))
                do_save_desk(None, values={**POLITICS_DESK, "required_groups": legal}, acting_user=None)
            if partner_feed_url:
                ensure_partner_feed(partner_feed_url, partner_feed_token)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(stored, indent=2))
        path.chmod(0o600)
        self.stdout.write("Demo users (username / password / role):")
        for username, role, is_staff, groups in DEMO_USERS:
            admin = " (staff: may open /admin/)" if is_staff else ""
            also = "".join(f" and {group}" for group in groups)
            self.stdout.write(f"  {username:<9} {stored[username]:<22} {role.value}{also}{admin}")
        self.stdout.write("Desks: General (1 approval) and Politics (2 approvals, one from Legal)")
        if partner_feed_url:
            self.stdout.write(f"Channels: web (the GALLEY_TARGET_* settings) and {PARTNER_FEED} at {partner_feed_url}")


def ensure_partner_feed(url: str, token: str) -> Channel:
    """The demo channel partner-feed at `url` with `token`, made default on its first run; audited as the
    system's. Later runs only follow the target's URL and token (an operator's other choices stay)."""
    channel = Channel.objects.select_for_update(of=("self",)).filter(slug=PARTNER_FEED).first()
    if channel is None:
        values: dict[str, Any] = {
            "slug": PARTNER_FEED,
            "name": "Partner feed",
            "kind": ChannelKind.REFERENCE,
            "base_url": url,
            "enabled": True,
            "is_default": True,
        }
        return do_save_channel(None, values=values, secret=token, acting_user=None)
    try:
        same_token = bool(channel.secret_sealed) and unseal(channel.secret_sealed) == token
    except SealedValueUnreadable:  # SECRET_KEY changed: the demo re-enters it, as an operator would
        same_token = False
    return do_save_channel(channel, values={"base_url": url}, secret="" if same_token else token, acting_user=None)
