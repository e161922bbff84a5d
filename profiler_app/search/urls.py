from django.urls import path

from . import views

urlpatterns = [
    path("models/<str:name>/find-best-config/", views.search_new, name="search_new"),
    path("models/<str:name>/find-best-config/probe", views.search_probe, name="search_probe"),
    path(
        "models/<str:name>/find-best-config/defaults.json",
        views.search_defaults,
        name="search_defaults",
    ),
    path("searches/<int:pk>/", views.search_detail, name="search_detail"),
    path("searches/<int:pk>/data.json", views.search_data, name="search_data"),
    path("searches/<int:pk>/cancel", views.search_cancel, name="search_cancel"),
    path("searches/<int:pk>/resume", views.search_resume, name="search_resume"),
    path("searches/<int:pk>/apply", views.search_apply, name="search_apply"),
    path("searches/<int:pk>/report.html", views.search_report, name="search_report"),
    path("searches/<int:pk>/config.pbtxt", views.search_candidate_config, name="search_config"),
]
