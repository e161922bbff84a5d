from django.urls import path

from . import views

urlpatterns = [
    path("models/<str:name>/try/", views.try_page, name="try_model"),
]
