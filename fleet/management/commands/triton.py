"""`manage.py triton status|load|unload|reload|check [--server NAME ...]`: scriptable Triton
control (exit 0 on success). ``check MODEL`` runs the model's checks (inference.checks) on
each server, here, one line per check; exit 1 when any fails. ``--server`` names the server; default ``default``. Several servers:
``status`` shows each in turn, and a load, unload or reload runs as one rollout
(``fleet.rollouts``): every server at once, one line per server with its outcome,
exit 0 only when every one succeeded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from registry import servers
from registry.servers import Server, UnknownServer
from registry.triton_clients import get_client
from repository_app import control, repository
from repository_app.status import group_index, overall_state
from team.cli import acting_user, active_user, add_as_user_argument
from team.roles import role_of
from triton_api.client import TritonError

from ...rollouts import runner
from ...rollouts.choose import ChoiceError, hand_picked


class Command(BaseCommand):
    help = "Show Triton's state, or load / unload a model (explicit model control)."
    # A command scripts call often: Django's system checks import every view (the URL
    # check), half a second of each start. `manage.py check` (make test) and `migrate`
    # (every start of the web container) still run them.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        # --server before the action too (`triton --server a --server b reload m`, as the
        # README writes it) or after it; both lists count. Its own dest: a subparser's
        # default would overwrite the same dest set before the action.
        parser.add_argument(
            "--server", action="append", dest="servers_first", metavar="NAME",
            help="the Triton server, before or after the action (repeatable)",
        )  # fmt: skip
        sub = parser.add_subparsers(dest="action", required=True)
        sub.add_parser("status", help="server and every model's state")
        load = sub.add_parser("load", help="load (or reload) a model")
        load.add_argument("model")
        load.add_argument(
            "--config-file",
            type=Path,
            help="a config.pbtxt or JSON ModelConfig to load with instead of the one on disk",
        )
        unload = sub.add_parser("unload", help="unload a model")
        unload.add_argument("model")
        reload = sub.add_parser("reload", help="load a model again (its config and files)")
        reload.add_argument("model")
        check = sub.add_parser("check", help="run a model's checks (exit 1 on a failure)")
        check.add_argument("model")
        for p in sub.choices.values():
            p.add_argument(
                "--server",
                action="append",
                dest="servers",
                metavar="NAME",
                help="the Triton server (repeat for several: a rollout to all of them at once, "
                "or each one's status); default: default",
            )
        add_as_user_argument((load, unload, reload, check), "this action is made as")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            named = [*(options.get("servers_first") or []), *(options.get("servers") or [])]
            chosen = [servers.get(n) for n in dict.fromkeys(named or ["default"])]
        except UnknownServer as exc:
            raise CommandError(f"--server: {exc.message}") from None
        if options["action"] == "check":
            self._check(chosen, options)
            return
        if options["action"] != "status" and len(chosen) > 1:
            self._rollout(chosen, options)
            return
        failed = []
        for server in chosen:
            # Several servers: each line says which one; one: the output is as it always was.
            prefix = f"[{server.name}] " if len(chosen) > 1 else ""
            try:
                self._one(server, options, prefix)
            except CommandError as exc:
                if len(chosen) == 1:
                    raise
                self.stderr.write(f"{prefix}{exc}")
                failed.append(server.name)
        if failed:
            raise CommandError(f"failed on {', '.join(failed)}")

    def _check(self, chosen: list[Server], options: dict[str, Any]) -> None:
        from inference import checks

        name = options["model"]
        failed = 0
        for server in chosen:
            user = acting_user(options["as_user"], "repository_app.control_models", server)
            queued = checks.queue_runs(server, name, user, "manage.py triton check", dispatch=False)
            if not queued:
                raise CommandError(f"{name} has no checks")
            for run in checks.run_here(queued, "manage.py triton check"):
                word = "PASS" if run.passed else "FAIL"
                failed += not run.passed
                text = run.message or run.error
                self.stdout.write(f"{word} {run.saved_check.name} on {server.name}: {text}")
        if failed:
            raise CommandError(f"{failed} check{'s' if failed != 1 else ''} failed")

    def _one(self, server: Server, options: dict[str, Any], prefix: str) -> None:
        try:
            if options["action"] == "status":
                self._status(server, prefix)
                return
            name = options["model"]
            user = acting_user(options["as_user"], "repository_app.control_models", server)
            repository.check_model_name(name)
            control.check_can_control(server)
            config = _read_override(options.get("config_file"))
            if config is not None:
                _check_override(server, name, config, user)
            outcome = control.act(
                server,
                options["action"],
                name,
                user.get_username(),
                user_id=user.pk,
                config=config,
            )
        except (TritonError, control.ActionRefused, repository.RepositoryError) as exc:
            raise CommandError(str(exc)) from exc
        if not outcome.ok:
            raise CommandError(outcome.message)
        self.stdout.write(prefix + outcome.message)

    def _rollout(self, chosen: list[Server], options: dict[str, Any]) -> None:
        if options.get("config_file") is not None:
            raise CommandError("--config-file loads a model on one server: name one --server")
        user = active_user(options["as_user"])
        try:
            choice = hand_picked([s.name for s in chosen], user)
        except ChoiceError as exc:  # a server hidden from the user: unknown to them
            raise CommandError(f"--server: {exc.message}") from None
        try:
            rollout = runner.create(options["action"], options["model"], choice, user)
        except runner.RolloutRefused as exc:
            if exc.status == 403:
                raise CommandError(
                    f"user {user.get_username()!r} (role {role_of(user)}) is not allowed to do "
                    f"this on {', '.join(choice.names)} (needs {runner.CONTROL_PERMISSION})"
                ) from None
            raise CommandError(exc.message) from None
        runner.run_here(rollout, "manage.py triton")
        for target in rollout.targets.all():
            if target.state == "succeeded":
                self.stdout.write(f"[{target.server}] {target.message}")
            else:
                self.stdout.write(f"[{target.server}] failed ({target.reason}): {target.message}")
        summary = f"rollout #{rollout.pk} {rollout.summary}"
        if rollout.state != "succeeded":
            raise CommandError(summary)
        self.stdout.write(summary)

    def _status(self, server: Server, prefix: str) -> None:
        client = get_client(server)
        info = client.server_info()
        self.stdout.write(
            f"{prefix}Triton {info.version} at {client.grpc_url}: "
            f"{'live' if info.live else 'not live'}, {'ready' if info.ready else 'not ready'}, "
            f"model control {info.control_mode}"
        )
        for name, states in sorted(group_index(client.repository_index()).items()):
            versions = " ".join(f"v{s.version}:{s.state}" for s in states if s.version)
            reason = next((s.reason for s in states if s.reason), "")
            line = f"{name}\t{overall_state(states)}"
            if versions:
                line += f"\t{versions}"
            if reason and overall_state(states) != "READY":
                line += f"\t{reason.splitlines()[0]}"
            self.stdout.write(prefix + line)


def _check_override(server: Server, name: str, config: dict[str, Any], user: Any) -> None:
    """A load with an override that changes the code Triton runs needs team.upload_code,
    as a save of the same config would."""
    from google.protobuf import json_format
    from tritonclient.grpc import model_config_pb2 as pb

    from repository_app.editor import saving
    from repository_app.modelconfig import parse_config

    try:
        override = json_format.ParseDict(config, pb.ModelConfig())
    except json_format.ParseError as exc:
        raise CommandError(f"--config-file: not a ModelConfig ({exc})") from None
    current = saving.read_current(name, server)
    try:
        saving.check_code_change(
            name, parse_config(current.data).config, override, user, server=server
        )
    except saving.CodeChangeRefused as exc:
        raise CommandError(exc.message) from None


def _read_override(path: Path | None) -> dict[str, Any] | None:
    """A config file for a trial load: JSON as Triton takes it, or config.pbtxt text."""
    if path is None:
        return None
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CommandError(f"--config-file {path}: {exc.strerror}") from exc
    if path.suffix == ".json":
        try:
            return dict(json.loads(data))
        except ValueError as exc:
            raise CommandError(f"--config-file {path}: not JSON ({exc})") from exc
    from google.protobuf import json_format

    from repository_app.modelconfig.parsing import parse_config

    result = parse_config(data)
    if result.config is None:
        first = result.findings[0]
        raise CommandError(f"{path}:{first.line or 0}:{first.col or 0}: {first.message}")
    return dict(json_format.MessageToDict(result.config, preserving_proto_field_name=True))
