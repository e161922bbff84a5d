"""What the editor shows of an ensemble: its step graph and its step models' tensors.

``graph(config)`` is the data static/js/editor_graph.js draws: the steps as nodes (with
the ensemble's inputs and outputs as two more), each ensemble tensor as edges from the
step (or ensemble input) that writes it to the steps (or ensemble output) that read it.
A tensor nobody writes, or that nobody reads, is an edge marked ``missing`` / ``unused``.

``models_io(root)`` reads each model's config.pbtxt in the repository (through
``repository.model_folder``: safe names, no links out) for its input and output names,
which the tensor maps offer as suggestions and "Complete the maps" fills in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tritonclient.grpc import model_config_pb2 as pb

from ..naming import is_safe_model_name
from ..repository import CONFIG_FILE, RepositoryError, model_folder, read_config

MAX_MODELS = 500  # a bound on what one page reads


def _tensor(t: Any) -> dict[str, Any]:
    return {
        "name": t.name,
        "data_type": pb.DataType.Name(t.data_type) if t.data_type else "",
        "dims": list(t.dims),
    }


def models_io(root: Path) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """{model: {"inputs": [...], "outputs": [...]}} for the repository's models whose
    config parses (name, data type and dims of each tensor)."""
    found: dict[str, dict[str, list[dict[str, Any]]]] = {}
    try:
        names = sorted(p.name for p in Path(root).iterdir() if is_safe_model_name(p.name))
    except OSError:
        return found
    for name in names[:MAX_MODELS]:
        try:
            folder = model_folder(name, Path(root))
        except RepositoryError:
            continue
        config, _ = read_config(folder / CONFIG_FILE)
        if config is None:
            continue
        found[name] = {
            "inputs": [_tensor(t) for t in config.input],
            "outputs": [_tensor(t) for t in config.output],
        }
    return found


def graph(config: pb.ModelConfig) -> dict[str, Any]:
    """Nodes and edges of the ensemble's data flow (see the module docstring)."""
    steps = config.ensemble_scheduling.step
    nodes: list[dict[str, Any]] = [
        {"id": "in", "kind": "inputs", "label": "ensemble inputs",
         "tensors": [t.name for t in config.input]},
    ]  # fmt: skip
    for i, step in enumerate(steps):
        nodes.append(
            {
                "id": f"step{i}",
                "kind": "step",
                "step": i,
                "label": step.model_name or "?",
                "version": step.model_version,
            }
        )
    nodes.append(
        {"id": "out", "kind": "outputs", "label": "ensemble outputs",
         "tensors": [t.name for t in config.output]}
    )  # fmt: skip
    writers: dict[str, list[tuple[str, str]]] = {t.name: [("in", t.name)] for t in config.input}
    readers: dict[str, list[tuple[str, str]]] = {}
    for i, step in enumerate(steps):
        for model_tensor, tensor in sorted(step.output_map.items()):
            writers.setdefault(tensor, []).append((f"step{i}", model_tensor))
        for model_tensor, tensor in sorted(step.input_map.items()):
            readers.setdefault(tensor, []).append((f"step{i}", model_tensor))
    for t in config.output:
        readers.setdefault(t.name, []).append(("out", t.name))
    edges: list[dict[str, Any]] = []
    for tensor in sorted(set(writers) | set(readers)):
        sources = writers.get(tensor) or [("in", "")]
        targets = readers.get(tensor) or [("out", "")]
        for source, source_tensor in sources:
            for target, target_tensor in targets:
                edges.append(
                    {
                        "from": source,
                        "to": target,
                        "tensor": tensor,
                        "from_tensor": source_tensor,
                        "to_tensor": target_tensor,
                        "missing": tensor not in writers,
                        "unused": tensor not in readers,
                    }
                )
    return {"nodes": nodes, "edges": edges}


def tensor_names(config: pb.ModelConfig) -> list[str]:
    """The ensemble's tensors: its inputs and outputs and every tensor the maps name."""
    names = {t.name for t in config.input} | {t.name for t in config.output}
    for step in config.ensemble_scheduling.step:
        names |= set(step.input_map.values()) | set(step.output_map.values())
    return sorted(n for n in names if n)
