"""/api/v1/: every app's API views, the OpenAPI schema and its docs page (no CDN)."""

from django.urls import path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from fleet import server_api
from fleet.rollouts import api as rollout_api
from inference import api as try_api
from profiler_app import api as sweep_api
from profiler_app.search import api as search_api
from repository_app import api as repository_api
from repository_app.editor import api as config_api
from repository_app.uploads import api as upload_api
from team.api import AuditListView, OwnTokenView

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
    path("models/<str:name>/config", config_api.ConfigView.as_view(), name="api_config"),
    path("models/<str:name>/try", try_api.TryView.as_view(), name="api_try"),
    path("models/<str:name>/checks", try_api.CheckListView.as_view(), name="api_checks"),
    path("models/<str:name>/checks/run", try_api.CheckRunView.as_view(), name="api_checks_run"),
    path("checks/<int:pk>", try_api.CheckDetailView.as_view(), name="api_check"),
    path("models/<str:name>/trace", try_api.TraceView.as_view(), name="api_trace"),
    path("models/<str:name>/trace/stop", try_api.TraceStopView.as_view(), name="api_trace_stop"),
    path(
        "try-results/<str:token>/<str:output>",
        try_api.TryResultView.as_view(),
        name="api_try_result",
    ),
    path(
        "models/<str:name>/config/validate",
        config_api.ConfigValidateView.as_view(),
        name="api_config_validate",
    ),
    path(
        "models/<str:name>/versions/", repository_api.VersionListView.as_view(), name="api_versions"
    ),
    path("uploads/", upload_api.UploadListView.as_view(), name="api_uploads"),
    path("uploads/<uuid:upload_id>/", upload_api.UploadDetailView.as_view(), name="api_upload"),
    path(
        "uploads/<uuid:upload_id>/complete",
        upload_api.UploadCompleteView.as_view(),
        name="api_upload_complete",
    ),
    path(
        "models/<str:name>/versions/<str:version>",
        upload_api.VersionDeleteView.as_view(),
        name="api_version_delete",
    ),
    path(
        "models/<str:name>/version-policy",
        upload_api.VersionPolicyView.as_view(),
        name="api_version_policy",
    ),
    path("sweeps/", sweep_api.SweepListView.as_view(), name="api_sweeps"),
    path("sweeps/<int:pk>/", sweep_api.SweepDetailView.as_view(), name="api_sweep"),
    path("sweeps/<int:pk>/points", sweep_api.SweepPointsView.as_view(), name="api_sweep_points"),
    path("sweeps/<int:pk>/cancel", sweep_api.SweepCancelView.as_view(), name="api_sweep_cancel"),
    path(
        "sweeps/<int:pk>/export.csv",
        sweep_api.SweepExportView.as_view(fmt="csv"),
        name="api_sweep_csv",
    ),
    path(
        "sweeps/<int:pk>/export.json",
        sweep_api.SweepExportView.as_view(fmt="json"),
        name="api_sweep_json",
    ),
    path("searches/", search_api.SearchListView.as_view(), name="api_searches"),
    path("searches/<int:pk>/", search_api.SearchDetailView.as_view(), name="api_search"),
    path(
        "searches/<int:pk>/cancel",
        search_api.SearchCancelView.as_view(action="cancel"),
        name="api_search_cancel",
    ),
    path(
        "searches/<int:pk>/resume",
        search_api.SearchCancelView.as_view(action="resume"),
        name="api_search_resume",
    ),
    path("searches/<int:pk>/apply", search_api.SearchApplyView.as_view(), name="api_search_apply"),
    path("rollouts/", rollout_api.RolloutListView.as_view(), name="api_rollouts"),
    path("rollouts/<int:pk>/", rollout_api.RolloutDetailView.as_view(), name="api_rollout"),
    *(
        path(
            f"rollouts/<int:pk>/{what}",
            rollout_api.RolloutActionView.as_view(what=what),
            name=f"api_rollout_{what}",
        )
        for what in ("cancel", "resume")
    ),
    path("servers/", server_api.ServerListView.as_view(), name="api_servers"),
    path("servers/<str:name>/", server_api.ServerDetailView.as_view(), name="api_server"),
    path("audit/", AuditListView.as_view(), name="api_audit"),
    path("schema/", SpectacularAPIView.as_view(), name="api_schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="api_schema"), name="api_docs"),
    path("token", OwnTokenView.as_view(), name="api_token"),
]
