"""`manage.py servers add|change|list|remove`: the Triton servers the dashboard manages,
as the Servers page and the API manage them (``server_admin``: the same checks, the same
permission, audited as the ``--as-user`` user). The restricted-API key is read from the
environment variable ``--api-key-env`` names, never from the command line (which other
users of the host can read), and never printed."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from registry import servers
from registry.server_rules import InvalidServer, labels_from_pairs, labels_text
from registry.servers import UnknownServer
from team.cli import acting_user, add_as_user_argument

from ... import overview as fleet
from ... import server_admin
from ...server_admin import NotAllowed, Refused

# Each field as this command names it, for its refusals.
OPTION = {
    "name": "NAME", "grpc_url": "--grpc", "http_url": "--http", "metrics_url": "--metrics",
    "repository": "--repository", "labels": "--label", "api_key": "--api-key-env",
    "api_key_header": "--api-key-header", "require_local_worker": "--require-local-worker",
}  # fmt: skip


class Command(BaseCommand):
    help = "List, add, change or remove the Triton servers the dashboard manages."
    # A command scripts call often: Django's system checks import every view (the URL
    # check), half a second of each start. `manage.py check` (make test) and `migrate`
    # (every start of the web container) still run them.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        listing = sub.add_parser("list", help="every server, its addresses, labels and health")
        listing.add_argument("--json", action="store_true", help="one JSON document")
        add = sub.add_parser("add", help="register a server (Admins)")
        change = sub.add_parser("change", help="change a registered server (Admins)")
        remove = sub.add_parser("remove", help="remove a registered server (Admins)")
        for p in (add, change, remove):
            p.add_argument("name", metavar="NAME")
        add.add_argument("--grpc", required=True, metavar="HOST:PORT", help="gRPC address")
        change.add_argument("--grpc", metavar="HOST:PORT", help="gRPC address")
        for p in (add, change):
            p.add_argument("--http", metavar="HOST:PORT",
                           help="HTTP address (add: default <gRPC host>:8000)")  # fmt: skip
            p.add_argument("--metrics", metavar="URL",
                           help="metrics URL (add: default http://<gRPC host>:8002/metrics)")  # fmt: skip
            p.add_argument("--repository", metavar="PATH",
                           help="its model repository on this host (add: default "
                                "MODEL_REPOSITORY, shared with 'default')")  # fmt: skip
            p.add_argument("--label", action="append", metavar="K=V",
                           help="a label (repeat for several; change: replaces them all)")  # fmt: skip
            p.add_argument("--api-key-env", metavar="VAR",
                           help="the environment variable that holds its restricted-API key")  # fmt: skip
            p.add_argument("--api-key-header", metavar="KEY",
                           help="the KEY of Triton's --grpc-restricted-protocol=...:KEY=VALUE")  # fmt: skip
        change.add_argument("--clear-api-key", action="store_true", help="forget the stored key")
        for p in (add, change):
            p.add_argument(
                "--require-local-worker", action=argparse.BooleanOptionalAction, default=None,
                help="its jobs run only on a worker consuming triton.NAME (else they wait)",
            )  # fmt: skip
        add_as_user_argument((add, change, remove), "this is done as")

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        if action == "list":
            self._list(options["json"])
            return
        user = acting_user(options["as_user"], server_admin.MANAGE)
        try:
            if action == "add":
                server = server_admin.create(user, self._fields(options))
                self.stdout.write(f"added {server.name}: {_line(server)}")
                self.stdout.write(
                    "  not contacted: its poller shows whether it answers (manage.py servers list)"
                )
            elif action == "change":
                server, changed = server_admin.update(user, options["name"], self._fields(options))
                done = ", ".join(changed) if changed else "nothing"
                self.stdout.write(f"changed {done} of {server.name}: {_line(server)}")
            else:
                self.stdout.write(server_admin.remove(user, options["name"]).message)
        except InvalidServer as exc:
            raise CommandError(
                "; ".join(f"{OPTION.get(f, f)}: {message}" for f, message in exc.errors.items())
            ) from None
        except (NotAllowed, Refused) as exc:
            raise CommandError(exc.message) from None
        except UnknownServer as exc:
            raise CommandError(exc.message) from None

    def _fields(self, options: dict[str, Any]) -> dict[str, Any]:
        given = {
            "name": options["name"],
            "grpc_url": options.get("grpc"),
            "http_url": options.get("http"),
            "metrics_url": options.get("metrics"),
            "repository": options.get("repository"),
            "api_key_header": options.get("api_key_header"),
            "require_local_worker": options.get("require_local_worker"),
        }
        if options.get("label") is not None:
            try:
                given["labels"] = labels_from_pairs(options["label"])
            except ValueError as exc:
                raise CommandError(f"--label: {exc}") from None
        variable = options.get("api_key_env")
        if variable:
            if variable not in os.environ:
                raise CommandError(f"--api-key-env: the environment variable {variable} is not set")
            given["api_key"] = os.environ[variable]
        if options.get("clear_api_key"):
            if variable:
                raise CommandError("--clear-api-key and --api-key-env: choose one")
            given["api_key"] = ""
        if options["action"] == "change":
            given = {k: v for k, v in given.items() if v is not None}
        return given

    def _list(self, as_json: bool) -> None:
        columns = fleet.columns(servers.all())
        if as_json:
            rows = [
                {**c.server.as_json(), "up": c.up, "reason": c.reason, "version": c.version}
                for c in columns
            ]
            self.stdout.write(json.dumps(rows, indent=2))
            return
        for c in columns:
            health = "up" if c.up else f"DOWN ({c.reason})"
            version = f" Triton {c.version}" if c.version else ""
            origin = " (from the environment)" if c.server.from_env else ""
            self.stdout.write(f"{c.name}{origin}: {_line(c.server)}; {health}{version}")


def _line(server: servers.Server) -> str:
    labels = labels_text(server.labels) or "no labels"
    key = "API key set" if server.api_key else "no API key"
    return (
        f"gRPC {server.grpc_url}, HTTP {server.http_url}, metrics {server.metrics_url}, "
        f"repository {server.repository}, {labels}, {key}"
    )
