"""Serve plotly's bundled plotly.min.js as a static file, straight from the installed package."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import plotly
from django.contrib.staticfiles.finders import BaseFinder
from django.core.files.storage import FileSystemStorage

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
        return [] if find_all else None

    def list(self, ignore_patterns: Any) -> Any:
        yield PLOTLY_JS.name, self.storage
