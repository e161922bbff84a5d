"""Repository-level rules: every model folder, then ensembles across models.

Cross-model ensemble checks mirror Triton's ``ensemble_utils.cc`` (tensor mapping,
data type/shape consistency, batch size, decoupled branching) and the repository
manager's dependency checks (missing models, required versions, cycles). Each folder's own
checks are ``folder_rules``'.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as pb

from .backends import io_completion
from .context import ServerFacts
from .findings import ERROR, WARNING, Finding, sort_findings
from .folder_rules import ModelEntry, load_model_dir


@dataclass(eq=False)
class _Node:
    """Ensemble tensor as in Triton's TensorNode (type/shape and where they came from)."""

    model: str
    data_type: int = pb.TYPE_INVALID
    dims: tuple[int, ...] = ()
    full_dims: tuple[int, ...] = ()
    is_decoupled: bool = False
    label: int = 0
    visited: bool = False
    prev: list[_Node] = field(default_factory=list)
    next: list[_Node] = field(default_factory=list)
    sibling: _Node | None = None


def _node(model: str, batching: bool, data_type: int, dims: list[int]) -> _Node:
    full = ((-1,) if batching else ()) + tuple(dims)
    return _Node(model, data_type, tuple(dims), full)


def _dims_compatible(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    return len(a) == len(b) and all(x == y or x == -1 or y == -1 for x, y in zip(a, b, strict=True))


def _dims_str(dims: tuple[int, ...]) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]"


def _consistency(prefix: str, lhs: _Node, rhs: _Node) -> str | None:
    if lhs.data_type == pb.TYPE_INVALID or rhs.data_type == pb.TYPE_INVALID:
        return None  # left for auto-complete; cannot judge statically
    if lhs.data_type != rhs.data_type:
        return (
            f"{prefix}inconsistent data type: {pb.DataType.Name(lhs.data_type)} is inferred from "
            f"model {lhs.model} while {pb.DataType.Name(rhs.data_type)} is inferred from model "
            f"{rhs.model}: make both sides use the same data_type"
        )
    if not lhs.dims or not rhs.dims:
        return None
    if not _dims_compatible(lhs.dims, rhs.dims) and not _dims_compatible(
        lhs.full_dims, rhs.full_dims
    ):
        return (
            f"{prefix}inconsistent shape: {_dims_str(lhs.full_dims)} is inferred from model "
            f"{lhs.model} while {_dims_str(rhs.full_dims)} is inferred from model {rhs.model}: "
            "make the dims agree (or use -1 for a variable dimension)"
        )
    return None


def _step_is_opaque(entry: ModelEntry) -> bool:
    """A step model whose I/O its backend may fill (from the model file, a DALI pipeline,
    model.py's auto_complete_config, a custom backend): we cannot check it."""
    config = entry.config
    assert config is not None
    if config.input or config.output:
        return False
    python_auto_complete = entry.folder.python_auto_complete if entry.folder else None
    return not entry.backend or io_completion(entry.backend, python_auto_complete) is not False


def _check_ensemble_models(ens: ModelEntry, models: dict[str, ModelEntry]) -> Iterator[Finding]:
    config = ens.config
    assert config is not None
    name = config.name or ens.name
    steps = config.ensemble_scheduling.step
    missing = sorted({s.model_name for s in steps if s.model_name and s.model_name not in models})
    if missing:
        yield Finding(
            ERROR,
            "ensemble.step-model-missing",
            f"ensemble {name} contains models that are not available or ambiguous: "
            f"{', '.join(missing)}: add those model folders to the repository or fix model_name",
            "ensemble_scheduling.step",
        )
    for idx, step in enumerate(steps):
        target = models.get(step.model_name)
        if target is None or target.config is None:
            continue
        path = f"ensemble_scheduling.step[{idx}].model_version"
        if step.model_version >= 0 and step.model_version not in target.loaded_versions:
            have = ", ".join(str(v) for v in target.loaded_versions) or "none"
            yield Finding(
                ERROR,
                "ensemble.step-version-missing",
                f"ensemble '{name}' depends on '{step.model_name}' whose required version "
                f"{step.model_version} is not loaded (loaded versions: {have}): add folder "
                f"{step.model_name}/{step.model_version}/, widen its version_policy, or use "
                "model_version: -1",
                path,
            )
        elif step.model_version < 0 and not target.loaded_versions:
            yield Finding(
                ERROR,
                "ensemble.step-version-missing",
                f"ensemble '{name}' depends on '{step.model_name}' which has no loadable "
                f"version: add a version folder to {step.model_name}",
                path,
            )
    yield from _check_tensor_flow(ens, models)


def _unknown_map_keys(
    name: str, sname: str, spath: str, side: str, mapping: Mapping[str, str], known: Collection[str]
) -> list[Finding]:
    """The keys of a step's ``{side}_map`` that name no {side} of its model (``known``)."""
    verb = "is mapping to" if side == "input" else "is mapped from"
    return [
        Finding(
            ERROR,
            f"ensemble.map-unknown-{side}",
            f"in ensemble {name}, ensemble tensor {tname} {verb} non-existing {side} {key} in "
            f"model {sname}: use one of {', '.join(sorted(known)) or f'no {side}s'}",
            f'{spath}.{side}_map["{key}"]',
        )
        for key, tname in mapping.items()
        if key not in known
    ]


def _check_tensor_flow(ens: ModelEntry, models: dict[str, ModelEntry]) -> Iterator[Finding]:
    """ValidateEnsembleConfig: mapping, consistency, batch size, decoupled branching."""
    config = ens.config
    assert config is not None
    name = config.name or ens.name
    batching = config.max_batch_size > 0
    tensors: dict[str, _Node] = {}
    for io in config.input:
        dims = list(io.reshape.shape) if io.HasField("reshape") else list(io.dims)
        tensors.setdefault(io.name, _node(name, batching, io.data_type, dims))
    sink = _Node(name)
    for io in config.output:
        dims = list(io.reshape.shape) if io.HasField("reshape") else list(io.dims)
        node = tensors.setdefault(io.name, _node(name, batching, io.data_type, dims))
        sink.prev.append(node)
        node.next.append(sink)

    complete = True
    for idx, step in enumerate(config.ensemble_scheduling.step):
        target = models.get(step.model_name)
        spath = f"ensemble_scheduling.step[{idx}]"
        if target is None or target.config is None or _step_is_opaque(target):
            complete = False
            continue
        mc = target.config
        sname = step.model_name
        if mc.max_batch_size != 0 and mc.max_batch_size < config.max_batch_size:
            yield Finding(
                ERROR,
                "ensemble.step-batch-size",
                f"ensemble {name} allows maximum batch size {config.max_batch_size}, but it "
                f"contains model {sname} which only allows maximum batch size to be "
                f"{mc.max_batch_size}: lower the ensemble's max_batch_size to "
                f"{mc.max_batch_size} or raise the step model's",
                "max_batch_size",
            )
        step_batching = mc.max_batch_size > 0
        inputs = {io.name: io for io in mc.input}
        outputs = {io.name: io for io in mc.output}
        unknown = _unknown_map_keys(name, sname, spath, "input", step.input_map, inputs)
        yield from unknown
        ok = not unknown
        for io in mc.input:
            mapped = [t for k, t in step.input_map.items() if k == io.name]
            if not mapped:
                if not io.optional:
                    ok = False
                    yield Finding(
                        ERROR,
                        "ensemble.step-input-unmapped",
                        f"in ensemble {name}, input {io.name} in model {sname} is not mapped to "
                        f'any ensemble tensors: add input_map {{ key: "{io.name}" value: "..." }} '
                        "to the step (or mark the input optional)",
                        spath,
                    )
                continue
            model_node = _node(sname, step_batching, io.data_type, list(io.dims))
            existing = tensors.get(mapped[0])
            if existing is None:
                tensors[mapped[0]] = model_node
            elif msg := _consistency(
                f"in ensemble {name}, ensemble tensor {mapped[0]}: ", existing, model_node
            ):
                yield Finding(
                    ERROR, "ensemble.tensor-mismatch", msg, f'{spath}.input_map["{io.name}"]'
                )
        unknown = _unknown_map_keys(name, sname, spath, "output", step.output_map, outputs)
        yield from unknown
        if unknown or not ok:
            complete = False
            continue
        sibling = _Node(sname)
        for key, tname in step.output_map.items():
            io = outputs[key]
            model_node = _node(sname, step_batching, io.data_type, list(io.dims))
            existing = tensors.get(tname)
            if existing is None:
                existing = tensors[tname] = model_node
            elif msg := _consistency(
                f"in ensemble {name}, ensemble tensor {tname}: ", existing, model_node
            ):
                yield Finding(
                    ERROR, "ensemble.tensor-mismatch", msg, f'{spath}.output_map["{key}"]'
                )
            existing.sibling = sibling
        decoupled = mc.model_transaction_policy.decoupled
        for tname in step.output_map.values():
            node = tensors[tname]
            node.is_decoupled = decoupled
            for in_name in step.input_map.values():
                prev = tensors.get(in_name)
                if prev is None:
                    prev = tensors[in_name] = _Node(name)
                node.prev.append(prev)
                prev.next.append(node)
    if complete:
        yield from _check_decoupled(name, config, tensors)


def _check_decoupled(
    name: str, config: pb.ModelConfig, tensors: dict[str, _Node]
) -> Iterator[Finding]:
    label = 0
    queue: list[_Node] = []
    for io in config.input:
        node = tensors.get(io.name)
        if node is not None:
            node.visited = True
            queue.append(node)
    while queue:
        current = queue.pop(0)
        for nxt in current.next:
            if nxt.visited or not all(p.visited for p in nxt.prev):
                continue
            first_label = nxt.prev[0].label
            if any(p.label != first_label for p in nxt.prev):
                yield Finding(
                    ERROR,
                    "ensemble.decoupled-branching",
                    f"in ensemble {name}, step of model '{nxt.model}' receives inputs originated "
                    "from different decoupled models: feed it from a single decoupled branch (or "
                    "make the upstream models non-decoupled)",
                    "ensemble_scheduling",
                )
                return
            if nxt.sibling is not None:
                if nxt.sibling.visited:
                    nxt.label = nxt.sibling.label
                else:
                    if nxt.is_decoupled:
                        label += 1
                        nxt.label = label
                    else:
                        nxt.label = first_label
                    nxt.sibling.label = nxt.label
                    nxt.sibling.visited = True
            elif nxt.is_decoupled:
                label += 1
                nxt.label = label
            else:
                nxt.label = first_label
            nxt.visited = True
            queue.append(nxt)


def _cycles(models: dict[str, ModelEntry]) -> dict[str, str]:
    """Ensemble name -> Triton-style cycle message, for ensembles that depend on themselves."""
    deps: dict[str, list[str]] = {}
    for name, entry in models.items():
        cfg = entry.config
        if cfg is not None and cfg.HasField("ensemble_scheduling"):
            deps[name] = [
                s.model_name for s in cfg.ensemble_scheduling.step if s.model_name in models
            ]
    found: dict[str, str] = {}
    for start in deps:
        stack = [(start, [start])]
        seen: set[str] = set()
        while stack:
            current, trail = stack.pop()
            for upstream in deps.get(current, []):
                if upstream == start:
                    cycle = " -> ".join([*trail, start])
                    found[start] = (
                        f"circular dependency between ensembles: {start} -> ... -> {current} -> "
                        f"{start} (cycle: {cycle}): remove one of these steps so no ensemble "
                        "runs itself"
                    )
                    stack.clear()
                    break
                if upstream not in seen:
                    seen.add(upstream)
                    stack.append((upstream, [*trail, upstream]))
    return found


def validate_repository_dir(
    path: Path, *, server: ServerFacts | None = None, strict: bool = False
) -> dict[str, list[Finding]]:
    """Validate every model folder under ``path`` plus cross-model ensemble rules."""
    result: dict[str, list[Finding]] = {}
    try:
        folders = sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError as exc:
        return {
            "": [
                Finding(
                    ERROR, "repository.unreadable", f"cannot list {path}: {exc}", file=str(path)
                )
            ]
        }
    if not folders:
        return {
            "": [
                Finding(
                    WARNING,
                    "repository.empty",
                    f"{path} holds no model folders: add one folder per model (each with "
                    "config.pbtxt and version folders)",
                    file=str(path),
                )
            ]
        }
    models = {p.name: load_model_dir(p, server=server, strict=strict) for p in folders}
    cycles = _cycles(models)
    for name, entry in models.items():
        cfg = entry.config
        if cfg is None or not cfg.HasField("ensemble_scheduling") or entry.platform != "ensemble":
            continue
        if name in cycles:
            entry.add(
                Finding(ERROR, "ensemble.circular-dependency", cycles[name], "ensemble_scheduling")
            )
        for finding in _check_ensemble_models(entry, models):
            entry.add(finding)
        entry.findings = sort_findings(entry.findings)
    for name, entry in models.items():
        result[name] = entry.findings
    return result
