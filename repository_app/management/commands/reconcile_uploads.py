"""`manage.py reconcile_uploads [--startup]`: remove stale upload staging data, print a table."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from ...uploads.reconcile import reconcile


class Command(BaseCommand):
    help = (
        "Remove upload staging data nobody will publish (see repository_app/uploads/"
        "reconcile.py). --startup: no web process is running, so uploads left PROCESSING "
        "were interrupted."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--startup", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        removed = reconcile(startup=options["startup"])
        if not removed:
            self.stdout.write("upload staging: nothing stale")
            return
        self.stdout.write(f"{'bytes':>14}  {'reason':<40}  folder")
        for item in removed:
            self.stdout.write(f"{item.bytes:>14}  {item.reason:<40}  {item.what}")
