"""`manage.py team narrow|unnarrow|narrowings`: a user's role narrowed per Triton server or
label, from the shell (audited as the system, like the other account commands here).

    manage.py team narrow USERNAME --server NAME | --label K=V --role viewer|none
    manage.py team unnarrow USERNAME --server NAME | --label K=V
    manage.py team narrowings [USERNAME]
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from team import narrowing_admin
from team.models import ServerRole
from team.narrowing import NARROWED_ROLES


class Command(BaseCommand):
    help = "Narrow a user's role on one Triton server or label (viewer or none), or undo it."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        narrow = sub.add_parser("narrow", help="narrow a user's role on a server or label")
        unnarrow = sub.add_parser("unnarrow", help="remove a narrowing")
        for p in (narrow, unnarrow):
            p.add_argument("username")
            which = p.add_mutually_exclusive_group(required=True)
            which.add_argument("--server", metavar="NAME", help="one server, by its name")
            which.add_argument("--label", metavar="K=V", help="every server with this label")
        narrow.add_argument(
            "--role",
            required=True,
            type=str.lower,
            choices=[r.lower() for r in NARROWED_ROLES],
            help="viewer: reads only there; none: the server does not exist for the user",
        )
        listing = sub.add_parser("narrowings", help="list narrowings and the servers they match")
        listing.add_argument("username", nargs="?")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            if options["action"] == "narrowings":
                self._list(options.get("username"))
                return
            user = narrowing_admin.user_named(options["username"])
            selector = {"server": options["server"] or "", "label": options["label"] or ""}
            if options["action"] == "narrow":
                row = narrowing_admin.narrow(None, user, **selector, role=options["role"])
                where = ", ".join(narrowing_admin.matched(row)) or "no server now"
                self.stdout.write(
                    f"{user.get_username()}: {row.selector} → {row.role.lower()} (matches: {where})"
                )
            else:
                row = narrowing_admin.unnarrow(None, user, **selector)
                self.stdout.write(f"{user.get_username()}: narrowing on {row.selector} removed")
        except narrowing_admin.NarrowingRefused as exc:
            raise CommandError(exc.message) from None

    def _list(self, username: str | None) -> None:
        rows = ServerRole.objects.select_related("user").order_by("user__username", "value")
        if username:
            rows = rows.filter(user=narrowing_admin.user_named(username))
        for row in rows:
            where = ", ".join(narrowing_admin.matched(row)) or "no server now"
            self.stdout.write(
                f"{row.user.get_username()}\t{row.kind}\t{row.selector}\t{row.role.lower()}"
                f"\t{where}"
            )
