"""`manage.py issue_token USERNAME`: print the user's API token (created on first use)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from team import tokens


class Command(BaseCommand):
    help = "Print the API token of a user (use it as 'Authorization: Token <token>')."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--rotate", action="store_true", help="replace an existing token")

    def handle(self, *args: Any, **options: Any) -> None:
        user = get_user_model().objects.filter(username=options["username"]).first()
        if user is None:
            raise CommandError(f"no user {options['username']!r}")
        token = None if options["rotate"] else tokens.token_of(user)
        if token is None:
            token = tokens.create(user, None)  # audited as the system
        self.stdout.write(token.key)
