"""The config Triton serves, beside the file on disk, and where they differ (drift).

Triton answers its model-config API with the config it loaded: the file as it was at the
last load (or a load's override), completed with what Triton fills in itself. So the file
is completed the same way first (``modelconfig.autocomplete.as_triton_completes``, the one
model of Triton's fills) and compared with the served config field by field; a field
Triton may fill from what the file cannot tell (a backend reading the model file, an
ensemble's steps, unknown GPUs) is left out while the file leaves it out. A hand edit, a
save without reload and a load with an override all show up here; a reload clears them.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2 as pb

from .modelconfig import FolderFacts, to_text
from .modelconfig.autocomplete import as_triton_completes
from .modelconfig.folder import folder_facts

if TYPE_CHECKING:
    from triton_api.connection import Endpoint


@dataclass(frozen=True)
class Drift:
    field: str
    disk: str  # the file's value as Triton completes it, short ("" when it has none)
    served: str  # Triton's value, short ("" when it serves none)
    filled: bool = False  # the disk value includes Triton's own fills

    def describe(self) -> str:
        if not self.disk:
            return f"{self.field}: served {self.served}, not in config.pbtxt"
        where = "config.pbtxt with Triton's defaults" if self.filled else "config.pbtxt"
        if not self.served:
            return f"{self.field}: {self.disk} in {where}, not served"
        return f"{self.field}: {self.disk} in {where}, {self.served} served"


def from_triton(config_json: dict[str, Any]) -> pb.ModelConfig:
    """Triton's model-config answer as a ModelConfig (unknown newer fields skipped)."""
    return json_format.ParseDict(config_json, pb.ModelConfig(), ignore_unknown_fields=True)


def _values(config: pb.ModelConfig) -> dict[str, Any]:
    return json_format.MessageToDict(config, preserving_proto_field_name=True)


def _short(value: Any) -> str:
    if value is None:
        return ""
    text = str(value) if not isinstance(value, dict | list) else _compact(value)
    return text if len(text) <= 80 else text[:77] + "…"


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def drift(
    disk: pb.ModelConfig,
    served: pb.ModelConfig,
    *,
    folder: FolderFacts | None = None,
    gpus: Collection[int] | None = None,
) -> list[Drift]:
    """Where the served config differs from the file as Triton completes it, one entry per
    top-level field. ``folder`` and ``gpus``: see ``as_triton_completes``."""
    completion = as_triton_completes(disk, folder=folder, gpus=gpus)
    expected, own, answer = _values(completion.config), _values(disk), _values(served)
    found = []
    for field in pb.ModelConfig.DESCRIPTOR.fields_by_name:
        if field in completion.unknown:
            continue
        left, right = expected.get(field), answer.get(field)
        if left != right:
            filled = left is not None and left != own.get(field)
            found.append(Drift(field, _short(left), _short(right), filled))
    return found


@dataclass
class Served:
    config: pb.ModelConfig | None  # None: Triton serves no version of it now
    text: str
    drift: list[Drift]
    error: str = ""  # why Triton could not be asked


def served_config(
    server: Endpoint, name: str, disk: pb.ModelConfig | None, folder: Path | None = None
) -> Served:
    """What ``server`` serves for ``name`` and its drift from ``disk`` (the config.pbtxt of
    the model folder ``folder``); only for a model with a READY version (an unloaded model
    serves nothing, so nothing can drift)."""
    from registry.triton_clients import get_client
    from triton_api.client import TritonError

    client = get_client(server)
    try:
        if not any(s.state == "READY" for s in client.model_states(name)):
            return Served(None, "", [])
        config = from_triton(client.model_config(name))
    except TritonError as exc:
        return Served(None, "", [], exc.message)
    if disk is None:
        return Served(config, to_text(config), [])
    facts = folder_facts(folder, disk.default_model_filename) if folder else None
    # The server's GPUs only where its fill of the instance groups depends on them.
    gpus = _server_gpus(server) if _needs_gpus(disk, facts) else None
    return Served(config, to_text(config), drift(disk, config, folder=facts, gpus=gpus))


def _needs_gpus(disk: pb.ModelConfig, facts: FolderFacts | None) -> bool:
    """Whether Triton's fill of the instance groups depends on the server's GPUs."""
    return "instance_group" in as_triton_completes(disk, folder=facts).unknown


def _server_gpus(server: Endpoint) -> list[int] | None:
    """The server's GPU ids from its metrics (cached), None when they do not answer."""
    from .server_facts import server_facts

    facts = server_facts(server)
    return facts.gpu_ids if facts is not None and facts.gpus_known else None


def policy_versions(config: pb.ModelConfig | None, on_disk: list[int]) -> set[int]:
    """The versions the version policy asks Triton to serve, of those on disk."""
    policy = config.version_policy if config is not None else pb.ModelVersionPolicy()
    which = policy.WhichOneof("policy_choice")
    if which == "all":
        return set(on_disk)
    if which == "specific":
        return set(on_disk) & set(policy.specific.versions)
    count = max(1, policy.latest.num_versions) if which == "latest" else 1
    return set(sorted(on_disk)[-count:])


def version_notes(
    config: pb.ModelConfig | None, on_disk: list[int], states: dict[str, tuple[str, str]]
) -> dict[int, tuple[str, str]]:
    """For each version on disk, (tone, note): served, failed, or why it is not served,
    e.g. "on disk, not served until reload". ``states``: version -> (state, reason)."""
    wanted = policy_versions(config, on_disk)
    loaded = any(state == "READY" for state, _ in states.values())
    notes: dict[int, tuple[str, str]] = {}
    for number in on_disk:
        state, reason = states.get(str(number), ("", ""))
        if state == "READY":
            notes[number] = ("ok", "served")
        elif state in ("LOADING", "UNLOADING"):
            notes[number] = ("busy", state.lower())
        elif state == "UNAVAILABLE" and reason and reason != "unloaded":
            notes[number] = ("error", f"failed: {reason.splitlines()[0]}")
        elif number in wanted and loaded:
            notes[number] = ("warning", "on disk, not served until reload")
        elif number in wanted:
            notes[number] = ("neutral", "not served: the model is not loaded")
        else:
            notes[number] = ("neutral", "not served: the version policy does not select it")
    return notes
