"""CSV cells that a spreadsheet opens as text: the one guard for every CSV the dashboard
writes (the audit trail, a sweep's export)."""

from __future__ import annotations

# A cell starting with one of these is a formula to Excel, LibreOffice and Sheets
# (=HYPERLINK(...) in a failed login's username): prefix a quote, as OWASP advises.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: str) -> str:
    # Spreadsheets skip leading blanks before they look for a formula (" =1+1", "\n=1").
    return "'" + value if value.lstrip(" \n\v\f").startswith(FORMULA_STARTS) else value
