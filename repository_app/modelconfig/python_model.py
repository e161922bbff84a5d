"""What a Python backend model.py says about its own config, read with ``ast`` (never run).

The Python backend calls ``TritonPythonModel.auto_complete_config(config)`` when it exists
(``hasattr`` on the class, so an inherited one counts) and auto-complete is on; that
function may add inputs, outputs and max_batch_size. Without it nothing fills a missing
data_type or dims, and Triton refuses the model.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

MAX_MODEL_PY_BYTES = 4 * 1024 * 1024  # larger files: not worth parsing on every check
_CLASS = "TritonPythonModel"
_HOOK = "auto_complete_config"


def defines_auto_complete(source: str | bytes) -> bool | None:
    """True/False when model.py surely does/does not define ``auto_complete_config``.

    None when we cannot tell: it does not parse, ``TritonPythonModel`` comes from
    another module, or it inherits from a class defined elsewhere.
    """
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    classes: dict[str, ast.ClassDef] = {}
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            classes.setdefault(node.name, node)
        elif isinstance(node, ast.ImportFrom | ast.Import):
            imported.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                # TritonPythonModel.auto_complete_config = ... set from outside the class
                if isinstance(target, ast.Attribute) and target.attr == _HOOK:
                    return None
                if isinstance(target, ast.Name) and target.id == _CLASS:
                    return None  # TritonPythonModel = SomethingElse
    if _CLASS not in classes:
        return None if _CLASS in imported else None
    return _class_defines(classes[_CLASS], classes, set())


def _class_defines(
    cls: ast.ClassDef, classes: dict[str, ast.ClassDef], seen: set[str]
) -> bool | None:
    seen.add(cls.name)
    for stmt in cls.body:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef) and stmt.name == _HOOK:
            return True
        if isinstance(stmt, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == _HOOK for t in stmt.targets
        ):
            return True
    answer: bool | None = False
    for base in cls.bases:
        if isinstance(base, ast.Name) and base.id == "object":
            continue
        if isinstance(base, ast.Name) and base.id in classes and base.id not in seen:
            inherited = _class_defines(classes[base.id], classes, seen)
            if inherited:
                return True
            if inherited is None:
                answer = None
            continue
        answer = None  # a base from another module may define it
    return answer


def model_py_auto_complete(paths: list[Path]) -> bool | None:
    """Combine the answer over the model.py of each version folder that has one.

    False as soon as one surely lacks it (that version will not load), True when every
    readable one has it, None when none could be read or some are unclear.
    """
    answers: list[bool | None] = []
    for path in paths:
        try:
            stat = path.stat()
            if not path.is_file() or stat.st_size > MAX_MODEL_PY_BYTES:
                continue
            answers.append(_file_defines(str(path), stat.st_mtime_ns, stat.st_size))
        except OSError:
            continue
    if not answers:
        return None
    if any(a is False for a in answers):
        return False
    return True if all(answers) else None


@functools.lru_cache(maxsize=1024)
def _file_defines(path: str, mtime_ns: int, size: int) -> bool | None:
    """Parsed once per file version: every model page asks (0.2-0.6 ms a parse)."""
    return defines_auto_complete(Path(path).read_bytes())
