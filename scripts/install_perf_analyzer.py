#!/usr/bin/env python3
"""Install perf_analyzer 2.48 into var/tools/ (idempotent; `make test` runs it).

PyPI's `perf-analyzer` package is an empty placeholder; the `tritonclient==2.48.0`
manylinux1 wheel carries the real binary at `tritonclient-2.48.0.data/data/bin/perf_analyzer`.
This downloads that wheel (no install: the project's venv keeps its own tritonclient),
extracts the binary to var/tools/perf_analyzer and links nvidia-pytriton's bundled
libcudart as var/tools/lib/libcudart.so.12, which the binary loads even without a GPU.
It also needs libb64.so.0d (Debian: libb64-0d).

    .venv/bin/python scripts/install_perf_analyzer.py [--wheel PATH] [--force]
"""

from __future__ import annotations

import argparse
import ctypes.util
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ROOT / "var" / "tools"
VERSION = "2.48.0"
MEMBER = f"tritonclient-{VERSION}.data/data/bin/perf_analyzer"


def download_wheel(target: Path) -> Path:
    subprocess.run(
        [
            sys.executable, "-m", "pip", "download", "--no-deps", f"tritonclient=={VERSION}",
            "-d", str(target), "--only-binary=:all:", "--platform", "manylinux1_x86_64",
            "--python-version", "3.11", "--quiet",
        ],
        check=True,
    )  # fmt: skip
    wheels = sorted(target.glob(f"tritonclient-{VERSION}-*.whl"))
    if not wheels:
        raise SystemExit(f"pip did not download tritonclient {VERSION}")
    return wheels[0]


def extract_binary(wheel: Path, destination: Path) -> None:
    with zipfile.ZipFile(wheel) as archive, archive.open(MEMBER) as source:
        tmp = destination.with_suffix(".tmp")
        with tmp.open("wb") as out:
            shutil.copyfileobj(source, out)
    tmp.chmod(tmp.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    tmp.replace(destination)


def find_cudart() -> Path:
    import pytriton  # nvidia-pytriton: its libs folder bundles libcudart

    libs = Path(pytriton.__file__).parent.parent / "nvidia_pytriton.libs"
    found = sorted(libs.glob("libcudart*.so.12*"))
    if not found:
        raise SystemExit(f"no libcudart*.so.12* in {libs}; install nvidia-cuda-runtime-cu12")
    return found[0]


def link_cudart(lib_dir: Path) -> Path:
    lib_dir.mkdir(parents=True, exist_ok=True)
    link = lib_dir / "libcudart.so.12"
    target = find_cudart()
    if link.is_symlink() or link.exists():
        if link.resolve() == target.resolve():
            return link
        link.unlink()
    link.symlink_to(target)
    return link


def check(binary: Path, lib_dir: Path) -> None:
    env = {
        **os.environ,
        "LD_LIBRARY_PATH": os.pathsep.join(
            filter(None, [str(lib_dir), os.environ.get("LD_LIBRARY_PATH")])
        ),
    }
    result = subprocess.run([str(binary), "--version"], capture_output=True, text=True, env=env)
    output = (result.stdout + result.stderr).strip()
    if "error while loading shared libraries" in output:
        hint = " (apt-get install libb64-0d)" if "libb64" in output else ""
        raise SystemExit(f"perf_analyzer cannot start: {output}{hint}")
    print(f"perf_analyzer ready: {binary} ({output.splitlines()[0] if output else 'ok'})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--wheel", type=Path, help="use this tritonclient 2.48.0 wheel instead of downloading"
    )
    parser.add_argument("--force", action="store_true", help="re-extract even if installed")
    parser.add_argument("--dest", type=Path, default=TOOLS, help="tools folder (default var/tools)")
    args = parser.parse_args(argv)
    binary = args.dest / "perf_analyzer"
    args.dest.mkdir(parents=True, exist_ok=True)
    if args.force or not binary.exists():
        if args.wheel:
            extract_binary(args.wheel, binary)
        else:
            with tempfile.TemporaryDirectory() as tmp:
                extract_binary(download_wheel(Path(tmp)), binary)
    link_cudart(args.dest / "lib")
    if ctypes.util.find_library("b64") is None:
        print("warning: libb64.so.0d not found; install Debian's libb64-0d", file=sys.stderr)
    check(binary, args.dest / "lib")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
