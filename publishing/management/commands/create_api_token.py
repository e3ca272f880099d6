from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from publishing.actions.api_tokens import do_create_api_token


class Command(BaseCommand):
    help = (
        "Create a JSON API token for a user and print its secret, once: only its sha256 is stored. "
        "The token acts with the user's roles (Editors, Approvers, Operators). Use it as "
        "`Authorization: Bearer <secret>`."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--name", default="api", help="What the token is for (shown in the admin).")

    def handle(self, *args: Any, **options: Any) -> None:
        user = User.objects.filter(username=options["username"]).first()
        if user is None:
            raise CommandError(f"There is no user {options['username']!r}.")
        if not user.is_active:
            raise CommandError(f"{user.username} is inactive: a token would be refused.")
        with transaction.atomic(durable=True):
            token, secret = do_create_api_token(user, name=options["name"][:100], acting_user=None)
        self.stderr.write(f"Token {token.prefix}… for {user.username}; the secret is shown only now:")
        self.stdout.write(secret)
