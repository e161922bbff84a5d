"""The audit trail over the API (read-only, filterable like the page)."""

from __future__ import annotations

from rest_framework import generics, serializers
from rest_framework.request import Request

from .models import AuditEvent
from .views import filtered_events


class AuditEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = AuditEvent
        fields = [
            "id", "at", "username", "action", "model_name", "target", "outcome", "detail",
            "before_sha256", "after_sha256",
        ]  # fmt: skip


class AuditListView(generics.ListAPIView):
    serializer_class = AuditEventSerializer

    def get_queryset(self):  # type: ignore[no-untyped-def]
        request: Request = self.request  # type: ignore[assignment]
        return filtered_events(request.query_params)[1]
