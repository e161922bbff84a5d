"""The Triton servers' table, until now repository_app's, becomes the registry's."""

from django.db import migrations, models


def _content_types_to(app_label, names):  # type: ignore[no-untyped-def]
    """Move the models' content types (and with them their permissions) to ``app_label``."""

    def move(apps, schema_editor):  # type: ignore[no-untyped-def]
        content_type = apps.get_model("contenttypes", "ContentType")
        other = "repository_app" if app_label != "repository_app" else "registry"
        content_type.objects.filter(app_label=other, model__in=names).update(app_label=app_label)

    return move


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("repository_app", "0013_publishjob"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        # The tables stay where they are (db_table): only Django's idea of which app owns
        # them moves.
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="TritonServer",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("name", models.CharField(max_length=40, unique=True)),
                        ("grpc_url", models.CharField(max_length=255)),
                        ("grpc_key", models.CharField(editable=False, max_length=255, unique=True)),
                        ("http_url", models.CharField(max_length=255)),
                        ("metrics_url", models.CharField(max_length=1024)),
                        ("api_key", models.CharField(blank=True, max_length=256)),
                        (
                            "api_key_header",
                            models.CharField(default="dashboard-key", max_length=64),
                        ),
                        ("labels", models.JSONField(blank=True, default=dict)),
                        ("repository", models.CharField(max_length=1024)),
                        ("require_local_worker", models.BooleanField(default=False)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("updated_at", models.DateTimeField(auto_now=True)),
                    ],
                    options={
                        "db_table": "repository_app_tritonserver",
                        "ordering": ["name"],
                    },
                ),
            ],
        ),
        migrations.RunPython(
            _content_types_to("registry", ("tritonserver",)),
            _content_types_to("repository_app", ("tritonserver",)),
        ),
    ]
