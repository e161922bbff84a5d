from django.apps import AppConfig


class ProfilerAppConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "profiler_app"
    verbose_name = "Performance sweeps"
