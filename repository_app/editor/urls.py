"""The config.pbtxt editor, mounted at models/<name>/config/ (every view gets ``name``)."""

from django.urls import path

from . import history_views, views

urlpatterns = [
    path("", views.config_editor, name="config_editor"),
    path("validate", views.config_validate, name="config_validate"),
    path("history/", history_views.config_history, name="config_history"),
    path("diff/", history_views.config_diff, name="config_diff"),
    path(
        "revisions/<int:revision_id>/restore", history_views.config_restore, name="config_restore"
    ),
]
