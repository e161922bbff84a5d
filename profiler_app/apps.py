from django.apps import AppConfig


class ProfilerAppConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "profiler_app"
    verbose_name = "Performance sweeps"

    def ready(self) -> None:
        # The two kinds of job register with the one lifecycle (profiler_app.jobs).
        from . import sweep_run  # noqa: F401
        from .search import runner  # noqa: F401
