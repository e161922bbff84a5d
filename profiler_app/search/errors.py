"""The errors of a config search that a page, the API or the command line shows as they are."""

from __future__ import annotations


class SearchError(Exception):
    """The search cannot be created or changed; the message is fit to show a user."""


class SearchRefused(SearchError):
    """Entries that do not fit the model (its kind) or each other: `errors` maps each
    entry's field name (a form field, or a flag) to why."""

    def __init__(self, errors: dict[str, str]) -> None:
        super().__init__("; ".join(errors.values()))
        self.errors = errors
