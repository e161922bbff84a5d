from django.apps import AppConfig


class FleetConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "fleet"
    verbose_name = "Fleet"

    def ready(self) -> None:
        from .rollouts import target_job  # noqa: F401 - a rollout's target is a kind of job
