"""Upload pages, mounted at the site root by repository_app/urls.py."""

from django.urls import path

from . import views

urlpatterns = [
    path("uploads/new-model/", views.new_model, name="upload_new_model"),
    path("models/<str:name>/upload/", views.new_version, name="upload_version"),
    path(
        "models/<str:name>/versions/<str:version>/delete",
        views.delete_version,
        name="version_delete",
    ),
    path("models/<str:name>/versions/policy", views.version_policy, name="version_policy"),
    path("models/<str:name>/delete", views.delete_model, name="model_delete"),
]
