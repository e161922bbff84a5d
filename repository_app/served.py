"""The config Triton serves, beside the file on disk, and where they differ (drift).

Triton answers its model-config API with the config it loaded: the file as it was at the
last load (or a load's override), completed with what Triton fills in itself (a version
policy, instance group names, default file names, pinned-memory options, I/O for
backends that auto-complete). So drift is judged field by field on what the file says:
- a top-level field the file sets is compared with the served value, after the fills
  that never mean a change (instance group names, count 0 as 1, version policy latest 1);
- a field the file leaves out is ignored when Triton fills it, except the ones Triton
  never invents (batching, scheduling, parameters, warmup, cache, transaction policy):
  served but gone from the file is drift too.
A hand edit, a save without reload and a load with an override all show up here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2 as pb

from .modelconfig import to_text

if TYPE_CHECKING:
    from .triton.client import Endpoint

# Fields Triton never fills in: present in what it serves means the file once had them.
USER_OWNED = (
    "dynamic_batching",
    "sequence_batching",
    "ensemble_scheduling",
    "parameters",
    "model_warmup",
    "response_cache",
    "model_transaction_policy",
    "model_metrics",
)
IGNORED = ("name",)


@dataclass(frozen=True)
class Drift:
    field: str
    disk: str  # the file's value, short ("" when the file does not set it)
    served: str  # Triton's value, short ("" when it serves none)

    def describe(self) -> str:
        if not self.disk:
            return f"{self.field}: served {self.served}, not in config.pbtxt"
        if not self.served:
            return f"{self.field}: {self.disk} in config.pbtxt, not served"
        return f"{self.field}: {self.disk} in config.pbtxt, {self.served} served"


def from_triton(config_json: dict[str, Any]) -> pb.ModelConfig:
    """Triton's model-config answer as a ModelConfig (unknown newer fields skipped)."""
    return json_format.ParseDict(config_json, pb.ModelConfig(), ignore_unknown_fields=True)


def _normalized(config: pb.ModelConfig) -> pb.ModelConfig:
    copy = pb.ModelConfig()
    copy.CopyFrom(config)
    for group in copy.instance_group:
        group.ClearField("name")
        if group.count == 0:
            group.count = 1
    policy = copy.version_policy
    if not copy.HasField("version_policy") or (
        policy.HasField("latest") and policy.latest.num_versions == 0
    ):
        policy.latest.num_versions = 1  # Triton's default, written out when it serves
    return copy


def _value(config: pb.ModelConfig, field: str) -> Any:
    return json_format.MessageToDict(config, preserving_proto_field_name=True).get(field)


def _short(value: Any) -> str:
    if value is None:
        return ""
    text = str(value) if not isinstance(value, dict | list) else _compact(value)
    return text if len(text) <= 80 else text[:77] + "…"


def _compact(value: Any) -> str:
    import json

    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _is_set(config: pb.ModelConfig, field: str) -> bool:
    descriptor = config.DESCRIPTOR.fields_by_name[field]
    if descriptor.label == descriptor.LABEL_REPEATED:
        return len(getattr(config, field)) > 0
    if descriptor.message_type is not None:
        return config.HasField(field)
    return getattr(config, field) != descriptor.default_value


def drift(disk: pb.ModelConfig, served: pb.ModelConfig) -> list[Drift]:
    """Where the served config differs from the file, one entry per top-level field."""
    a, b = _normalized(disk), _normalized(served)
    found = []
    for field in pb.ModelConfig.DESCRIPTOR.fields_by_name:
        if field in IGNORED:
            continue
        on_disk = _is_set(disk, field) or field == "version_policy"
        if not on_disk and not (field in USER_OWNED and _is_set(served, field)):
            continue  # Triton's own fill of something the file leaves out
        if field in ("backend", "platform") and not _is_set(disk, field):
            continue
        left, right = _value(a, field), _value(b, field)
        if left != right:
            found.append(Drift(field, _short(left), _short(right)))
    return found


@dataclass
class Served:
    config: pb.ModelConfig | None  # None: Triton serves no version of it now
    text: str
    drift: list[Drift]
    error: str = ""  # why Triton could not be asked


def served_config(server: Endpoint, name: str, disk: pb.ModelConfig | None) -> Served:
    """What ``server`` serves for ``name`` and its drift from ``disk``; only for a model with
    a READY version (an unloaded model serves nothing, so nothing can drift)."""
    from .triton.client import TritonError, get_client

    client = get_client(server)
    try:
        if not any(s.state == "READY" for s in client.model_states(name)):
            return Served(None, "", [])
        config = from_triton(client.model_config(name))
    except TritonError as exc:
        return Served(None, "", [], exc.message)
    return Served(config, to_text(config), drift(disk, config) if disk is not None else [])


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
