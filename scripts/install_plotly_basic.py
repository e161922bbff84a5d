#!/usr/bin/env python3
"""Install Plotly's basic bundle (plotly.js-basic-dist-min 3.7.0) into var/vendor/ (idempotent;
`make run`, `make test` and the image build run it).

The pages draw scatter and bar traces only (with error bars, shapes, annotations, date and
category axes): all in plotly.js's basic distribution (scatter, bar, pie), 1.1 MB where the
full bundle in the plotly wheel is 4.85 MB, and a browser evaluates it in half the time.
This fetches npm's tarball with urllib (no npm needed), refuses it unless its sha256 is the
one pinned below, and writes its package/plotly-basic.min.js to var/vendor/plotly-basic.min.js
with its LICENSE and a stamp (version and sha256) beside it. 3.7.0 is the plotly.js inside
the plotly 6.9.0 wheel. common/staticfinders.py serves the file as
static/vendor/plotly.min.js, and the wheel's full bundle while it is missing.

    .venv/bin/python scripts/install_plotly_basic.py [--tarball PATH | --url URL] [--force]
        [--dest DIR] [--offline-ok]

Exit status 1 when the tarball is refused (checksum, contents) or cannot be fetched; with
--offline-ok an unreachable registry is a note and status 0 (the full bundle is served).
Standard library only: the image build runs it before anything else imports.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import io
import json
import sys
import tarfile
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENDOR = ROOT / "var" / "vendor"
PACKAGE = "plotly.js-basic-dist-min"
VERSION = "3.7.0"
URL = f"https://registry.npmjs.org/{PACKAGE}/-/{PACKAGE}-{VERSION}.tgz"
# sha256 of the tarball; npm's own integrity for it is sha512-84KPQhLTrO5IHu6DCte2KwA4bz...
TARBALL_SHA256 = "671aa70a322bd6222a233be824d0f148c08f08c3cc64c85d1a409bd89d17a39d"
BUNDLE = "plotly-basic.min.js"  # the name in the tarball and under var/vendor/
LICENSE = "plotly-basic.LICENSE"
STAMP = "plotly-basic.json"
MEMBERS = {f"package/{BUNDLE}": BUNDLE, "package/LICENSE": LICENSE}
MAX_BYTES = 16 * 2**20  # the tarball is 0.4 MB, the bundle in it 1.1 MB
TIMEOUT_S = 20


class Refused(Exception):
    """The tarball is not the pinned one, or does not hold the bundle."""


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def installed(dest: Path) -> bool:
    """The pinned version is there, whole (its bytes still hash to the stamp's sha256)."""
    try:
        stamp = json.loads((dest / STAMP).read_text())
        bundle = (dest / BUNDLE).read_bytes()
    except (OSError, ValueError):
        return False
    return (
        isinstance(stamp, dict)
        and stamp.get("version") == VERSION
        and stamp.get("tarball_sha256") == TARBALL_SHA256
        and stamp.get("sha256") == _sha256(bundle)
    )


def fetch(url: str) -> bytes:
    """The tarball at `url`; OSError (urllib's URLError among them) when unreachable."""
    with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:  # noqa: S310 - https pin
        data: bytes = response.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise Refused(f"{url} is over {MAX_BYTES} bytes")
    return data


def unpack(tarball: bytes) -> dict[str, bytes]:
    """{name under var/vendor: bytes} of the members wanted, after the checksum; Refused
    otherwise. Only the named regular files are read: nothing in the archive picks a path."""
    digest = _sha256(tarball)
    if digest != TARBALL_SHA256:
        raise Refused(
            f"{PACKAGE} {VERSION}: sha256 {digest} is not the pinned {TARBALL_SHA256}; "
            "nothing installed"
        )
    found: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as archive:
            for member in archive:
                target = MEMBERS.get(member.name)
                if target and member.isfile() and member.size <= MAX_BYTES:
                    source = archive.extractfile(member)
                    assert source is not None  # a regular file
                    found[target] = source.read()
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise Refused(f"{PACKAGE} {VERSION}: unreadable tarball ({exc})") from None
    if BUNDLE not in found:
        raise Refused(f"{PACKAGE} {VERSION}: the tarball has no package/{BUNDLE}")
    return found


def install(files: dict[str, bytes], dest: Path) -> None:
    """Write each file beside its final name, then rename: a reader (the static finder)
    sees the old file or the new one, never half of one. The stamp comes last."""
    dest.mkdir(parents=True, exist_ok=True)
    stamp = {
        "package": PACKAGE,
        "version": VERSION,
        "tarball_sha256": TARBALL_SHA256,
        "sha256": _sha256(files[BUNDLE]),
    }
    for name, data in [*files.items(), (STAMP, json.dumps(stamp, indent=1).encode() + b"\n")]:
        tmp = dest / f".{name}.tmp"
        tmp.write_bytes(data)
        tmp.replace(dest / name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--tarball", type=Path, help=f"use this {PACKAGE}-{VERSION}.tgz file")
    source.add_argument("--url", default=URL, help="fetch the tarball from here (a mirror)")
    parser.add_argument("--force", action="store_true", help="install even if installed")
    parser.add_argument("--dest", type=Path, default=VENDOR, help="default var/vendor")
    parser.add_argument(
        "--offline-ok",
        action="store_true",
        help="an unreachable registry is a note, not a failure (the full bundle is served)",
    )
    args = parser.parse_args(argv)
    target = args.dest / BUNDLE
    if not args.force and installed(args.dest):
        print(f"Plotly basic {VERSION} ready: {target}")
        return 0
    try:
        tarball = args.tarball.read_bytes() if args.tarball else fetch(args.url)
        install(unpack(tarball), args.dest)
    except Refused as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except (OSError, http.client.HTTPException) as exc:  # unreachable, timeout, no --tarball
        served = (
            f"pages keep the earlier basic bundle in {target}"
            if target.is_file()
            else "pages load the full Plotly bundle of the plotly wheel"
        )
        message = f"could not read {args.tarball or args.url} ({exc}); {served}"
        if args.offline_ok and not args.tarball:
            print(f"note: {message}", file=sys.stderr)
            return 0
        print(f"error: {message}", file=sys.stderr)
        return 1
    print(f"Plotly basic {VERSION} installed: {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
