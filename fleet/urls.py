from django.urls import include, path

from . import server_views, views

urlpatterns = [
    # Load, unload or reload on several servers: fleet/rollouts/.
    path("", include("fleet.rollouts.urls")),
    # The servers the dashboard manages (Admins change them) and the fleet overview.
    path("servers/", server_views.server_list, name="server_list"),
    path("servers/new/", server_views.server_new, name="server_new"),
    path("servers/<str:name>/edit/", server_views.server_edit, name="server_edit"),
    path("servers/<str:name>/remove/", server_views.server_remove, name="server_remove"),
    path("fleet/", views.fleet_page, name="fleet"),
    path("fleet/states.json", views.fleet_states_json, name="fleet_states_json"),
]
