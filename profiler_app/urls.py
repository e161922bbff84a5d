from django.urls import include, path

from . import views

urlpatterns = [
    path("sweeps/", views.sweep_list, name="sweep_list"),
    path("sweeps/compare/", views.sweep_compare, name="sweep_compare"),
    path("sweeps/<int:pk>/", views.sweep_detail, name="sweep_detail"),
    path("sweeps/<int:pk>/data.json", views.sweep_data, name="sweep_data"),
    path("sweeps/<int:pk>/cancel", views.sweep_cancel, name="sweep_cancel"),
    path("sweeps/<int:pk>/resume", views.sweep_resume, name="sweep_resume"),
    path("sweeps/<int:pk>/rerun", views.sweep_rerun, name="sweep_rerun"),
    path("sweeps/<int:pk>/label", views.sweep_label, name="sweep_label"),
    path("sweeps/<int:pk>/export.csv", views.sweep_csv, name="sweep_csv"),
    path("sweeps/<int:pk>/export.json", views.sweep_json_export, name="sweep_json_export"),
    path("sweeps/<int:pk>/report.html", views.sweep_report_html, name="sweep_report"),
    path("models/<str:name>/benchmark/", views.sweep_new, name="sweep_new"),
    path("", include("profiler_app.search.urls")),
]
