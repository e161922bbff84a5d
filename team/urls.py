from django.contrib.auth import views as auth_views
from django.urls import path

from . import views

urlpatterns = [
    path("audit/", views.audit_log, name="audit_log"),
    path("audit.csv", views.audit_csv, name="audit_csv"),
    path("team/users/", views.users, name="team_users"),
    path("team/users/<int:user_id>/", views.change_user, name="team_change_user"),
    path("team/users/<int:user_id>/active", views.set_user_active, name="team_user_active"),
    path(
        "team/users/<int:user_id>/password/",
        views.reset_user_password,
        name="team_user_password",
    ),
    path("team/users/<int:user_id>/delete/", views.delete_user, name="team_user_delete"),
    path("team/users/<int:user_id>/narrow", views.narrow_user, name="team_user_narrow"),
    path(
        "team/users/<int:user_id>/narrowings/<int:narrowing_id>/remove",
        views.unnarrow_user,
        name="team_user_unnarrow",
    ),
    path(
        "team/users/<int:user_id>/token/revoke",
        views.revoke_user_token,
        name="team_revoke_token",
    ),
    path("accounts/token/", views.own_token, name="own_token"),
    path(
        "accounts/password/",
        auth_views.PasswordChangeView.as_view(success_url="/accounts/password/done/"),
        name="password_change",
    ),
    path(
        "accounts/password/done/",
        auth_views.PasswordChangeDoneView.as_view(),
        name="password_change_done",
    ),
]
