from django.apps import AppConfig


class TeamConfig(AppConfig):
    """Accounts, roles and the audit trail shared by every part of the dashboard."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "team"
    label = "team"
    verbose_name = "Team"

    def ready(self) -> None:
        from . import signals  # noqa: F401
