"""The editor's two Triton actions: reload after a save, and try a config without saving.

Both run synchronously in the request (a Python-backend model reloads in about a second;
Triton's own load timeout bounds the rest).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2 as pb

from registry.servers import Server
from registry.triton_clients import get_client
from triton_api.client import TritonError

from .. import control
from ..modelconfig import parse_config
from .saving import CodeChangeRefused, check_code_change, read_current

# What Triton answers when a config override breaks one of its later rules.
OPAQUE_REFUSAL = "failed to poll from model repository"


@dataclass
class TritonVerdict:
    ok: bool
    message: str  # Triton's own text (or ours when Triton was not asked)
    previous_serving: bool = False
    restored: bool = True  # after a trial: the saved config serves again (or stays unloaded)
    restore_message: str = ""
    was_loaded: bool = False
    states: dict[str, Any] = field(default_factory=dict)

    @property
    def opaque(self) -> bool:
        """Triton gave no reason: the page points at the validator's findings."""
        return not self.ok and OPAQUE_REFUSAL in self.message


def config_override(config: pb.ModelConfig) -> dict[str, Any]:
    """The JSON form of a ModelConfig that Triton's load(config=...) accepts."""
    return json_format.MessageToDict(config, preserving_proto_field_name=True)


def _is_ready(server: Server, name: str) -> bool:
    try:
        return any(s.state == "READY" for s in get_client(server).model_states(name))
    except TritonError:
        return False


def reload_saved(server: Server, name: str, username: str, user_id: int | None) -> TritonVerdict:
    """Load the config just saved on disk into the server; on failure Triton keeps the
    previous one."""
    action = "reload" if _is_ready(server, name) else "load"
    try:  # through the model's claim, as every action: refused while another one runs
        outcome = control.act(server, action, name, username, user_id=user_id)
    except control.ActionRefused as exc:
        return TritonVerdict(False, str(exc), previous_serving=_is_ready(server, name))
    return TritonVerdict(
        outcome.ok,
        outcome.message,
        previous_serving=outcome.previous_serving,
        states=outcome.states,
    )


def try_config(server: Server, name: str, config: pb.ModelConfig, user: Any) -> TritonVerdict:
    """Load ``config`` into the server as an override, report Triton's verdict, then put
    things back: load the saved config again when the model was loaded before, else unload
    it. A trial that changes the code Triton loads needs team.upload_code, like a save."""
    try:
        current = read_current(name, server)
        check_code_change(name, parse_config(current.data).config, config, user, server=server)
        control.check_can_control(server)
    except control.ActionRefused as exc:
        return TritonVerdict(False, str(exc), restored=True, restore_message="nothing changed")
    except CodeChangeRefused as exc:
        return TritonVerdict(False, exc.message, restored=True, restore_message="nothing changed")
    username = user.get_username() if hasattr(user, "get_username") else str(user)
    try:
        with control.claimed(server, name, "reload", username):
            return _trial(server, name, config)
    except control.ActionRefused as exc:
        return TritonVerdict(False, str(exc), restored=True, restore_message="nothing changed")


def _trial(server: Server, name: str, config: pb.ModelConfig) -> TritonVerdict:
    """The trial load and the putting back of ``try_config``, under the model's claim."""
    client = get_client(server)
    was_loaded = _is_ready(server, name)
    try:
        client.load(name, config=config_override(config))
        verdict = TritonVerdict(True, f"Triton loaded {name} with this config: READY")
    except TritonError as exc:
        verdict = TritonVerdict(False, exc.message)
    verdict.was_loaded = was_loaded
    try:
        if was_loaded:
            # A plain load would be a no-op: Triton only re-reads files whose timestamps
            # changed, and the trial touched none. So the saved config goes as override too.
            saved = parse_config(read_current(name, server).data).config
            client.load(name, config=config_override(saved) if saved is not None else None)
            verdict.restore_message = "the saved config is loaded again"
        else:
            client.unload(name)
            verdict.restore_message = "the model is unloaded again, as it was"
    except TritonError as exc:
        verdict.restored = False
        verdict.restore_message = f"putting the saved config back failed: {exc.message}"
    return verdict
