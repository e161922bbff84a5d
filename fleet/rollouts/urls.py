from django.urls import path

from . import views

urlpatterns = [
    path("rollouts/", views.rollouts, name="rollouts"),
    path("rollouts/new", views.rollout_new, name="rollout_new"),
    path("rollouts/<int:pk>/", views.rollout_detail, name="rollout_detail"),
    *(
        path(f"rollouts/<int:pk>/{what}", views.rollout_act, {"what": what}, name=f"rollout_{what}")
        for what in ("cancel", "resume")
    ),
]
