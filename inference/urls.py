from django.urls import path

from . import views

urlpatterns = [
    path("models/<str:name>/try/", views.try_page, name="try_model"),
    path("models/<str:name>/trace/", views.trace_page, name="trace_model"),
]
