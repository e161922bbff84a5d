from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.templatetags.static import static
from django.urls import include, path
from django.utils.functional import lazy
from django.views.generic import RedirectView

from team.ratelimit import RateLimitedAdminLoginView, RateLimitedLoginView

from . import views

urlpatterns = [
    path("", views.overview, name="overview"),
    path("healthz", views.healthz, name="healthz"),
    # Pages link the SVG icon; browsers and tools that ask for /favicon.ico anyway get it too.
    path(
        "favicon.ico",
        RedirectView.as_view(url=lazy(static, str)("img/favicon.svg")),
        name="favicon",
    ),
    path("accounts/login/", RateLimitedLoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    # Before admin.site.urls: the admin's own login view is neither rate limited nor audited.
    path("admin/login/", RateLimitedAdminLoginView.as_view(), name="admin_login"),
    path("admin/", admin.site.urls),
    path("", include("team.urls")),
    path("api/v1/", include("dashboard.api_urls")),
    path("", include("repository_app.urls")),
    path("", include("profiler_app.urls")),
    path("", include("inference.urls")),
    path("", include("fleet.urls")),
]
