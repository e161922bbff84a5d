"""``manage.py validate_config PATH [PATH ...]``: lint config.pbtxt files, model folders, repositories."""

from __future__ import annotations

import json
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...modelconfig.findings import Finding
from ...modelconfig.validate import ServerFacts, validate_path
from ...modelconfig.versions import parse_triton_version


class Command(BaseCommand):
    help = (
        "Validate Triton model configs. PATH is a config.pbtxt, a model folder (holds "
        "config.pbtxt) or a model repository. Exits 1 when any error is found."
    )
    requires_system_checks: list[str] = []  # runs without a database or full app setup

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("paths", nargs="+", metavar="PATH")
        parser.add_argument("--format", choices=("text", "json"), default="text")
        parser.add_argument(
            "--strict",
            action="store_true",
            help="mirror --disable-auto-complete-config: require fields Triton could auto-fill",
        )
        parser.add_argument(
            "--gpus",
            default=None,
            help="comma-separated GPU ids of the target server ('' for a CPU-only server); "
            "default: asked from the --server's Triton when it answers",
        )
        parser.add_argument(
            "--triton-version",
            default=None,
            metavar="X.Y",
            help="Triton version of the target server (e.g. 2.51 for release 24.10): fields, "
            "platforms and name rules newer than it are errors; default: the configured "
            "Triton's, else the newest release",
        )
        parser.add_argument("--no-server", action="store_true", help="skip the server-level rules")
        parser.add_argument(
            "--server",
            default="default",
            metavar="NAME",
            help="the Triton server whose version and GPUs the rules judge against "
            "(default: default, the TRITON_* environment's)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        server = self._server_facts(options)
        findings: list[Finding] = []
        for path in options["paths"]:
            for source, found in validate_path(
                path, server=server, strict=options["strict"]
            ).items():
                findings.extend(f.with_file(source) for f in found)
        if options["format"] == "json":
            self.stdout.write(json.dumps([f.to_dict() for f in findings], indent=2))
        else:
            for f in findings:
                self.stdout.write(f.format())
            errors = sum(f.is_error for f in findings)
            warnings = len(findings) - errors
            self.stderr.write(f"{errors} error(s), {warnings} warning(s)")
        if any(f.is_error for f in findings):
            self.stdout.flush()
            sys.exit(1)

    def _server_facts(self, options: dict[str, Any]) -> ServerFacts | None:
        """Flags win over what the configured Triton says; ask it only for what is missing."""
        version = None
        if options["triton_version"] is not None:
            try:
                version = parse_triton_version(options["triton_version"])
            except ValueError as exc:
                raise CommandError(f"--triton-version: {exc}") from exc
        gpus = None
        if options["gpus"] is not None:
            gpus = [int(x) for x in options["gpus"].split(",") if x.strip()]
        asked = None
        if not options["no_server"] and (gpus is None or version is None):
            from registry import servers

            from ...server_facts import server_facts

            try:
                target = servers.get(options["server"])
            except servers.UnknownServer as exc:
                raise CommandError(f"--server: {exc.message}") from None
            asked = server_facts(target)
        if asked is not None:
            version = version or asked.version
            if gpus is None and asked.gpus_known:
                gpus = asked.gpu_ids
        if gpus is None and version is None:
            return None
        return ServerFacts(gpu_ids=gpus or [], gpus_known=gpus is not None, version=version)
