"""Serve plotly's bundled plotly.min.js as a static file, straight from the installed package,
and the static files storage (hashed names, compressed copies) collectstatic writes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import plotly
from django.contrib.staticfiles.finders import BaseFinder
from django.core.files.storage import FileSystemStorage
from whitenoise.compress import brotli_installed
from whitenoise.storage import CompressedManifestStaticFilesStorage

PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
STATIC_PATH = "vendor/plotly.min.js"


class PlotlyFinder(BaseFinder):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.storage = FileSystemStorage(location=str(PLOTLY_JS.parent))
        # collectstatic copies found files under this prefix.
        self.storage.prefix = "vendor"  # type: ignore[attr-defined]

    def check(self, **kwargs: Any) -> list[Any]:
        return []

    def find(self, path: str, find_all: bool = False, **kwargs: Any) -> Any:
        if path == STATIC_PATH:
            return [str(PLOTLY_JS)] if find_all else str(PLOTLY_JS)
        # [] either way, as Django's finders answer: finders.find() collects a None into
        # [None], which whitenoise (autorefresh) then takes for a path, e.g. for a hashed name.
        return []

    def list(self, ignore_patterns: Any) -> Any:
        yield PLOTLY_JS.name, self.storage


class IncrementalCompressedManifestStorage(CompressedManifestStaticFilesStorage):
    """whitenoise's storage (content-hashed names, .gz and .br copies) that compresses only
    hashed files without compressed copies yet. A hashed name is its content, so copies
    already beside it are current; Brotli's best setting takes seconds per large file
    (6.5 s for plotly.min.js), which every collectstatic would otherwise pay again."""

    def compress_files(self, paths: Any) -> Any:
        wanted = (".gz", ".br") if brotli_installed else (".gz",)
        stale = [p for p in paths if not all(self.exists(p + ext) for ext in wanted)]
        return super().compress_files(stale)
