"""Serve Plotly as static files, without a CDN, and the static files storage (hashed names,
compressed copies) collectstatic writes.

Two names, decided when a file is asked for:
- `vendor/plotly.min.js`, what the pages load: Plotly's basic bundle (scatter, bar, pie;
  1.1 MB) that scripts/install_plotly_basic.py puts at settings.PLOTLY_BASIC_JS, or, while
  it is not installed (an offline install), the full bundle of the plotly wheel (4.85 MB);
- `vendor/plotly-full.min.js`, always the wheel's full bundle: for a page that draws a trace
  type outside basic (a heatmap, a box plot...), which loads this name instead.
"""

from __future__ import annotations

import logging
import re
from datetime import datetime
from pathlib import Path
from typing import Any

import plotly
from django.conf import settings
from django.contrib.staticfiles.finders import BaseFinder
from django.core.files.storage import FileSystemStorage
from whitenoise.compress import brotli_installed
from whitenoise.storage import CompressedManifestStaticFilesStorage

logger = logging.getLogger(__name__)

FULL_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
STATIC_PATH = "vendor/plotly.min.js"
FULL_STATIC_PATH = "vendor/plotly-full.min.js"


def basic_js() -> Path:
    return Path(settings.PLOTLY_BASIC_JS)


def plotly_js() -> Path:
    """The bundle the pages (and the self-contained reports) use: basic when installed."""
    basic = basic_js()
    return basic if basic.is_file() else FULL_JS


def describe() -> str:
    """One line for `make run` and the web process's log: which bundle, and why."""
    served = plotly_js()
    size = f"{served.stat().st_size / 1e6:.2f} MB"
    if served != FULL_JS:
        return f"Plotly basic bundle {_version(served)} ({size}, {served})"
    return (
        f"Plotly's basic bundle is not installed ({basic_js()}): pages load the full bundle "
        f"{_version(FULL_JS)} of the plotly wheel ({size}); "
        "run .venv/bin/python scripts/install_plotly_basic.py"
    )


def _version(path: Path) -> str:
    # The bundle's first lines: "* plotly.js (basic - minified) v3.7.0".
    with path.open(encoding="utf-8", errors="replace") as bundle:
        found = re.search(r"plotly\.js[^\n]*? (v\d+\.\d+\.\d+)", bundle.read(300))
    return found.group(1) if found else "(version unknown)"


class _FileAs(FileSystemStorage):
    """One file under a name of our choosing (collectstatic and whitenoise read a listed
    file through path(), opening included)."""

    def __init__(self, name: str, file: Path) -> None:
        super().__init__(location=str(file.parent))
        self._public_name, self._file = name, file
        # collectstatic copies found files under this prefix.
        self.prefix = "vendor"

    def path(self, name: str) -> str:
        return str(self._file) if name == self._public_name else super().path(name)

    def get_modified_time(self, name: str) -> datetime:
        # No time, so collectstatic copies the file every time (as it does for storages
        # without one): which file a name stands for changes (basic installed, or gone)
        # while the new file may be older than the copy. Copying 6 MB is cheap, and
        # compression runs only for new hashes.
        raise NotImplementedError("the file behind a name changes; copy it every time")


class PlotlyFinder(BaseFinder):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Once a process (Django caches finders): say when the fallback is served.
        if plotly_js() == FULL_JS:
            logger.warning(describe())

    def _files(self) -> dict[str, Path]:
        return {STATIC_PATH: plotly_js(), FULL_STATIC_PATH: FULL_JS}

    def check(self, **kwargs: Any) -> list[Any]:
        return []

    def find(self, path: str, find_all: bool = False, **kwargs: Any) -> Any:
        file = self._files().get(path)
        if file is not None:
            return [str(file)] if find_all else str(file)
        # [] either way, as Django's finders answer: finders.find() collects a None into
        # [None], which whitenoise (autorefresh) then takes for a path, e.g. for a hashed name.
        return []

    def list(self, ignore_patterns: Any) -> Any:
        for path, file in self._files().items():
            name = path.removeprefix("vendor/")
            yield name, _FileAs(name, file)


class IncrementalCompressedManifestStorage(CompressedManifestStaticFilesStorage):
    """whitenoise's storage (content-hashed names, .gz and .br copies) that compresses only
    hashed files without compressed copies yet. A hashed name is its content, so copies
    already beside it are current; Brotli's best setting takes seconds per large file
    (6.5 s for plotly.min.js), which every collectstatic would otherwise pay again."""

    def compress_files(self, paths: Any) -> Any:
        wanted = (".gz", ".br") if brotli_installed else (".gz",)
        stale = [p for p in paths if not all(self.exists(p + ext) for ext in wanted)]
        return super().compress_files(stale)
