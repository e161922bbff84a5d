#!/usr/bin/env python3
"""Build var/gpu/bundle.tar.xz: what scripts/gpu_check.sh needs on the lent GPU machine.

That machine reaches no package registry and has only its own Python (3.12, with torch
and numpy), so everything else travels in one archive (the device tool carries at most
64 MiB per call):

    site/pytriton/tritonserver/   tritonserver 2.51 from the nvidia-pytriton wheel (the
                                  Python-backend stub for the target Python only)
    site/nvidia_pytriton.libs/    its shared libraries (the binaries' RPATH points here)
    site/{grpc,google,rapidjson,hpack,tritonclient}/
                                  the engine's imports: grpcio, protobuf and
                                  python-rapidjson as wheels for
                                  the target Python, at this venv's versions; tritonclient
                                  and hpack (pure Python) copied from this venv
    triton_backends/python/       the Python backend with the stub in place
                                  (devstack.services.prepare_backends)
    perf_analyzer/                perf_analyzer 2.48 (tritonclient 2.48.0's wheel) with
                                  lib/libcudart.so.12 and lib/libb64.so.0d beside it

    .venv/bin/python scripts/gpu_bundle.py [--python-version 3.12] [--out PATH]

`--python-version 3.11` builds one for this machine, to rehearse the check on the CPU
(scripts/gpu_check.sh --rehearse).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from devstack.services import prepare_backends  # noqa: E402
from scripts.install_perf_analyzer import MEMBER, extract_binary  # noqa: E402

PLATFORMS = ("manylinux_2_35_x86_64", "manylinux_2_28_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64")  # fmt: skip
MAX_BYTES = 60 * 2**20  # under the device tool's 64 MiB carry limit, with room for the code


def download(requirements: list[str], python_version: str, dest: Path) -> dict[str, Path]:
    """Wheels for the target Python (no dependencies), by distribution name."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--python-version", python_version, "--implementation", "cp", "-d", str(dest),
           "--quiet"]  # fmt: skip
    for platform in PLATFORMS:
        cmd += ["--platform", platform]
    subprocess.run(cmd + requirements, check=True)
    wheels = {}
    for wheel in dest.glob("*.whl"):
        wheels[wheel.name.split("-")[0].lower().replace("_", "-")] = wheel
    return wheels


def extract(archive: zipfile.ZipFile, member: zipfile.ZipInfo, dest: Path) -> None:
    """One member, keeping its permission bits (zipfile drops them: binaries need +x)."""
    path = Path(archive.extract(member, dest))
    mode = member.external_attr >> 16 & 0o777
    if mode:
        path.chmod(mode)


def unpack(wheel: Path, site: Path) -> None:
    """A wheel's files into `site` (what `pip install --target` does, minus scripts)."""
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.infolist():
            if ".data/" not in member.filename:
                extract(archive, member, site)


def copy_package(name: str, site: Path) -> None:
    """A pure-Python package of this venv, copied as it is."""
    module = __import__(name)
    source = Path(module.__file__).parent
    shutil.copytree(source, site / name, ignore=shutil.ignore_patterns("__pycache__"))


def build(python_version: str, out: Path) -> Path:
    with tempfile.TemporaryDirectory() as tmp:
        wheels_dir, stage = Path(tmp) / "wheels", Path(tmp) / "bundle"
        wheels_dir.mkdir()
        site = stage / "site"
        site.mkdir(parents=True)
        binary = ("grpcio", "protobuf", "python-rapidjson")  # tritonclient.grpc needs rapidjson
        pins = [f"{d}=={importlib.metadata.version(d)}" for d in binary]
        wheels = download(
            ["nvidia-pytriton==0.7.0", "tritonclient==2.48.0", *pins], python_version, wheels_dir
        )
        for name in binary:
            unpack(wheels[name], site)
        for name in ("tritonclient", "hpack"):
            copy_package(name, site)

        # tritonserver: the wheel's layout, so the binaries' RPATH finds the libraries.
        with zipfile.ZipFile(wheels["nvidia-pytriton"]) as archive:
            for member in archive.infolist():
                name = member.filename
                stubs = "pytriton/tritonserver/python_backend_stubs/"
                if name.startswith(stubs) and not name.startswith(f"{stubs}{python_version}/"):
                    continue
                if name.startswith(("pytriton/tritonserver/", "nvidia_pytriton.libs/")):
                    extract(archive, member, site)
        prepare_backends(stage, root=site / "pytriton", python_version=python_version)

        tools = stage / "perf_analyzer"
        (tools / "lib").mkdir(parents=True)
        with zipfile.ZipFile(wheels["tritonclient"]) as archive:
            if MEMBER not in archive.namelist():
                raise SystemExit(f"no {MEMBER} in {wheels['tritonclient'].name}")
        extract_binary(wheels["tritonclient"], tools / "perf_analyzer")
        libs = site / "nvidia_pytriton.libs"
        for pattern, link in (("libcudart-*.so.12*", "libcudart.so.12"), ("libb64-*.so.0d", "libb64.so.0d")):  # fmt: skip
            found = sorted(libs.glob(pattern))
            if not found:
                raise SystemExit(f"nvidia-pytriton's libs have no {pattern}")
            shutil.copy2(found[0], tools / "lib" / link)

        out.parent.mkdir(parents=True, exist_ok=True)
        partial = out.with_suffix(".partial")
        with tarfile.open(partial, "w:xz", preset=6) as tar:
            tar.add(stage, arcname=".")
        partial.replace(out)
    size = out.stat().st_size
    if size > MAX_BYTES:
        raise SystemExit(f"{out} is {size / 2**20:.1f} MiB: over {MAX_BYTES / 2**20:.0f} MiB")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python-version", default="3.12", help="the device's Python (3.12)")
    parser.add_argument("--out", type=Path, default=ROOT / "var" / "gpu" / "bundle.tar.xz")
    args = parser.parse_args()
    out = build(args.python_version, args.out)
    print(f"{out}: {out.stat().st_size / 2**20:.1f} MiB for Python {args.python_version}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
