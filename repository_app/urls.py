from django.urls import include, path, re_path

from . import views

urlpatterns = [
    path("models/", views.model_list, name="model_list"),
    path("models/states.json", views.states_json, name="model_states_json"),
    path("models/restore", views.restore_loads, name="restore_loads"),
    path("models/<str:name>/", views.model_detail, name="model_detail"),
    # Uploads, version deletion and the version-policy shortcut: repository_app/uploads/.
    path("", include("repository_app.uploads.urls")),
    # The config editor (form + text mode, history): repository_app/editor/.
    path("models/<str:name>/config/", include("repository_app.editor.urls")),
    path("models/<str:name>/stats.json", views.model_stats_json, name="model_stats_json"),
    re_path(
        r"^models/(?P<name>[^/]+)/(?P<action>load|unload|reload)$",
        views.model_action,
        name="model_action",
    ),
    path("server/", views.server, name="server"),
    path("server/history.json", views.server_history_json, name="server_history_json"),
]
