"""The rollouts' tables, until now repository_app's, become the fleet app's."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def _content_types_to(app_label, names):  # type: ignore[no-untyped-def]
    """Move the models' content types (and with them their permissions) to ``app_label``."""

    def move(apps, schema_editor):  # type: ignore[no-untyped-def]
        content_type = apps.get_model("contenttypes", "ContentType")
        other = "repository_app" if app_label != "repository_app" else "fleet"
        content_type.objects.filter(app_label=other, model__in=names).update(app_label=app_label)

    return move


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ("repository_app", "0013_publishjob"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        # The tables stay where they are (db_table): only Django's idea of which app owns
        # them moves.
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="Rollout",
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
                        ("action", models.CharField(max_length=10)),
                        ("model", models.CharField(max_length=255)),
                        ("chosen", models.CharField(max_length=500)),
                        ("username", models.CharField(max_length=150)),
                        (
                            "state",
                            models.CharField(
                                choices=[
                                    ("running", "running"),
                                    ("succeeded", "succeeded"),
                                    ("partial", "partial"),
                                    ("failed", "failed"),
                                ],
                                default="running",
                                max_length=10,
                            ),
                        ),
                        ("summary", models.CharField(blank=True, max_length=500)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("finished_at", models.DateTimeField(blank=True, null=True)),
                        (
                            "user",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                    ],
                    options={
                        "db_table": "repository_app_rollout",
                        "ordering": ["-id"],
                    },
                ),
                migrations.CreateModel(
                    name="RolloutTarget",
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
                        (
                            "state",
                            models.CharField(
                                choices=[
                                    ("queued", "Queued"),
                                    ("running", "Running"),
                                    ("succeeded", "Succeeded"),
                                    ("failed", "Failed"),
                                    ("cancelled", "Cancelled"),
                                    ("interrupted", "Interrupted"),
                                ],
                                db_index=True,
                                default="queued",
                                max_length=12,
                            ),
                        ),
                        ("cancel_requested", models.BooleanField(default=False)),
                        ("queued_at", models.DateTimeField(blank=True, null=True)),
                        ("dispatched_at", models.DateTimeField(blank=True, null=True)),
                        ("started_at", models.DateTimeField(blank=True, null=True)),
                        ("heartbeat_at", models.DateTimeField(blank=True, null=True)),
                        ("finished_at", models.DateTimeField(blank=True, null=True)),
                        ("attempts", models.PositiveIntegerField(default=0)),
                        ("error", models.TextField(blank=True)),
                        ("queue", models.CharField(blank=True, max_length=255)),
                        ("routing", models.TextField(blank=True)),
                        ("waiting_for_worker", models.BooleanField(default=False)),
                        ("worker", models.CharField(blank=True, max_length=255)),
                        ("worker_host", models.CharField(blank=True, max_length=255)),
                        ("server", models.CharField(max_length=40)),
                        ("labels", models.TextField(blank=True, default="")),
                        ("reason", models.CharField(blank=True, max_length=40)),
                        ("message", models.TextField(blank=True)),
                        (
                            "rollout",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="targets",
                                to="fleet.rollout",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "repository_app_rollouttarget",
                        "ordering": ["rollout", "server"],
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("rollout", "server"), name="rollouttarget_server"
                            )
                        ],
                    },
                ),
            ],
        ),
        migrations.RunPython(
            _content_types_to(
                "fleet",
                (
                    "rollout",
                    "rollouttarget",
                ),
            ),
            _content_types_to(
                "repository_app",
                (
                    "rollout",
                    "rollouttarget",
                ),
            ),
        ),
    ]
