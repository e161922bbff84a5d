from django.apps import AppConfig


class RepositoryAppConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "repository_app"
    verbose_name = "Model repository"
