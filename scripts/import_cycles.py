"""Import cycles among the application's modules, from their source (nothing is imported).

    python scripts/import_cycles.py          # module-level imports only
    python scripts/import_cycles.py --all    # function-level imports too (the hidden ones)

Exit status 1 when there is a cycle, so it can gate a change.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

# The application's packages: every top-level package of the project but its tests.
ROOTS = tuple(
    sorted(
        init.parent.name
        for init in Path(__file__).resolve().parent.parent.glob("*/__init__.py")
        if init.parent.name != "tests"
    )
)


def modules(base: Path) -> dict[str, Path]:
    found = {}
    for root in ROOTS:
        for path in (base / root).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            name = ".".join(path.relative_to(base).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def imported(name: str, path: Path, node: ast.Import | ast.ImportFrom, known: set[str]) -> set[str]:
    """The application modules one import statement reaches."""
    if isinstance(node, ast.Import):
        targets = [alias.name for alias in node.names]
    else:
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        base = node.module or ""
        if node.level:
            parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
            base = ".".join([*parts, base] if base else parts)
        targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
    reached = set()
    for target in targets:
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target and target != name:
            reached.add(target)
    return reached


def graph(base: Path, every_import: bool) -> dict[str, set[str]]:
    found = modules(base)
    edges: dict[str, set[str]] = {name: set() for name in found}
    for name, path in found.items():
        tree = ast.parse(path.read_text())
        typing_only = {  # `if TYPE_CHECKING:` imports never run: they make no circle
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING")
            for inner in ast.walk(node)
        }
        nodes = ast.walk(tree) if every_import else iter(tree.body)
        for node in nodes:
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.Import | ast.ImportFrom):
                if isinstance(node, ast.ImportFrom) and node.module == "__future__":
                    continue
                edges[name] |= imported(name, path, node, set(found))
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = counter
                counter += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(edges[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def main() -> int:
    every_import = "--all" in sys.argv[1:]
    found = cycles(graph(Path(__file__).resolve().parent.parent, every_import))
    kind = "module-level and function-level imports" if every_import else "module-level imports"
    print(f"{len(found)} import cycle(s) ({kind})")
    for component in found:
        print("  " + " <-> ".join(component))
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
