from django.apps import AppConfig


class ProfilerAppConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "profiler_app"
    verbose_name = "Performance sweeps"

    def ready(self) -> None:
        # The two kinds of job register with the one lifecycle (profiler_app.jobs).
        # Its sweeps are marks on a server's metrics history (the repository app's page).
        from repository_app import history

        from . import sweep_run  # noqa: F401
        from .history_marks import sweep_marks
        from .search import runner  # noqa: F401

        if sweep_marks not in history.marker_sources:
            history.marker_sources.append(sweep_marks)
