"""The audit trail over the API (read-only, filterable like the page), and revoking your token."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import generics, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from . import tokens
from .models import AuditEvent
from .views import filtered_events


class AuditEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = AuditEvent
        fields = [
            "id", "at", "username", "action", "model_name", "server", "target", "outcome",
            "detail", "before_sha256", "after_sha256",
        ]  # fmt: skip


class AuditListView(generics.ListAPIView):
    serializer_class = AuditEventSerializer

    def get_queryset(self):  # type: ignore[no-untyped-def]
        request: Request = self.request  # type: ignore[assignment]
        return filtered_events(request.query_params, request.user)[1]


class OwnTokenView(APIView):
    @extend_schema(
        request=None,
        responses={
            204: None,
            404: inline_serializer(
                "TokenError",
                {
                    "message": serializers.CharField(),
                    "field": serializers.CharField(allow_null=True),
                },
            ),
        },
        summary="Revoke your own API token (the one this request uses, if it uses one)",
        description="The token stops working at once; create a new one at /accounts/token/.",
    )
    def delete(self, request: Request) -> Response:
        if not tokens.revoke(request.user, request.user, reason="revoked by its owner (API)"):
            return Response({"message": "you have no API token", "field": None}, status=404)
        return Response(status=204)
