"""Count wrong verdicts of a validator checkout over this corpus (before/after figures).

    .venv/bin/python tests/data/realworld/measure.py [SOURCE_ROOT]

SOURCE_ROOT holds the repository_app to measure (default: this checkout); for an older
commit: ``git archive <commit> repository_app dashboard | tar -x -C /tmp/old``, then pass
/tmp/old. A verdict is wrong when a config Triton loads gets an error (folder level, or the
single config.pbtxt), or a planted error is not reported by its rule id.
"""

from __future__ import annotations

import inspect
import os
import sys
import time
from pathlib import Path

CORPUS = Path(__file__).resolve().parent
ROOT = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else CORPUS.parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")

from repository_app.modelconfig.validate import (  # noqa: E402
    ServerFacts,
    validate_path,
    validate_repository,
)


def read_case(case: Path) -> dict[str, str]:
    info = {}
    for line in (case / "README.md").read_text().splitlines():
        key, sep, value = line.partition(":")
        if sep:
            info[key.strip().lower()] = value.strip()
    return info


def main() -> int:
    versions = "version" in inspect.signature(ServerFacts).parameters
    counts = dict.fromkeys(("false", "missed", "other", "template_syntax"), 0)
    lines: list[str] = []
    cases = sorted(p for p in CORPUS.iterdir() if p.is_dir())
    configs = 0
    start = time.perf_counter()
    for case in cases:
        info = read_case(case)
        planted = {r.strip() for r in info.get("planted", "").split(",") if r.strip()}
        template = info.get("template") == "yes"
        loads = info["triton loads it"].startswith("yes")
        allowed = planted | ({"template.placeholder"} if template else set())
        strict = info.get("strict") == "yes"
        server = None
        if "server" in info and versions:
            version = tuple(int(x) for x in info["server"].split("."))
            server = ServerFacts(version=version, gpus_known=False)  # type: ignore[call-arg]
        caught: set[str] = set()
        for model, findings in validate_repository(case, server=server, strict=strict).items():
            runs = [("folder", findings)]
            config = case / model / "config.pbtxt"
            if config.is_file():
                configs += 1
                single = validate_path(config, server=server, strict=strict)
                runs.append(("file", [f for fs in single.values() for f in fs]))
            for level, found in runs:
                errors = {f.rule for f in found if f.is_error}
                caught |= errors if level == "folder" else set()
                if loads and errors:
                    counts["false"] += 1
                    lines.append(f"false error ({level}) {case.name}/{model}: {sorted(errors)}")
                elif not loads and errors - allowed:
                    kind = "template_syntax" if errors - allowed == {"parse.syntax"} else "other"
                    counts[kind] += 1
                    lines.append(
                        f"{kind} ({level}) {case.name}/{model}: {sorted(errors - allowed)}"
                    )
        for rule in sorted(planted - caught):
            counts["missed"] += 1
            lines.append(f"planted error missed {case.name}: {rule}")
    elapsed = time.perf_counter() - start
    print("\n".join(lines))
    print(f"{configs} configs in {len(cases)} repositories, {elapsed * 1000:.0f} ms")
    print(f"false errors on configs Triton loads (folder and file level): {counts['false']}")
    print(f"planted real errors missed: {counts['missed']}")
    print(f"templates stopped at the first placeholder: {counts['template_syntax']}")
    print(f"other errors on broken configs that are not the planted ones: {counts['other']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
