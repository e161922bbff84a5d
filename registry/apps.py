from django.apps import AppConfig


class RegistryConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "registry"
    verbose_name = "Triton servers"

    def ready(self) -> None:
        from team import audit, narrowing

        from . import servers

        # An event's concerns carry its servers' labels (team knows no registry).
        audit.labels_of = servers.labels_of
        # The narrowings apply to the registry's servers (team knows no registry).
        narrowing.known_servers = servers.all
