"""The API's list pagination: DRF's limit/offset, with both bounded, so that `?limit=10**30`
or a huge offset is clamped instead of reaching the database as an integer it cannot hold
(a 500 before)."""

from __future__ import annotations

from typing import Any

from rest_framework.pagination import LimitOffsetPagination

MAX_LIMIT = 1000
MAX_OFFSET = 2**62  # below every database's 64-bit integers, with room for offset + limit


class BoundedLimitOffsetPagination(LimitOffsetPagination):
    max_limit = MAX_LIMIT

    def get_offset(self, request: Any) -> int:
        return min(super().get_offset(request), MAX_OFFSET)
