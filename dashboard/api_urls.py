"""/api/v1/: every app's API views, the OpenAPI schema and its docs page (no CDN)."""

from django.urls import path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from dashboard.team.api import AuditListView
from repository_app import api as repository_api

urlpatterns = [
    path("models/", repository_api.ModelListView.as_view(), name="api_models"),
    path("models/<str:name>/", repository_api.ModelDetailView.as_view(), name="api_model"),
    path(
        "models/<str:name>/state", repository_api.ModelStateView.as_view(), name="api_model_state"
    ),
    *[
        path(
            f"models/<str:name>/{action}",
            repository_api.ModelActionView.as_view(action_name=action),
            name=f"api_model_{action}",
        )
        for action in ("load", "unload", "reload")
    ],
    path("audit/", AuditListView.as_view(), name="api_audit"),
    path("schema/", SpectacularAPIView.as_view(), name="api_schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="api_schema"), name="api_docs"),
]
