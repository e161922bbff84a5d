"""Checks, their runs and trace sessions (inference.models)."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="Check",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("model", models.CharField(max_length=255)),
                ("name", models.CharField(max_length=120)),
                ("request", models.JSONField()),
                ("expected", models.JSONField()),
                ("tolerance", models.JSONField(blank=True, default=dict)),
                ("username", models.CharField(max_length=150)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                (
                    "created_by",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "ordering": ["model", "name"],
            },
        ),
        migrations.CreateModel(
            name="CheckRun",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
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
                ("username", models.CharField(max_length=150)),
                ("trigger", models.CharField(max_length=120)),
                ("passed", models.BooleanField(null=True)),
                ("worst", models.FloatField(blank=True, null=True)),
                ("message", models.TextField(blank=True)),
                ("restorable", models.PositiveIntegerField(blank=True, null=True)),
                (
                    "saved_check",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="runs",
                        to="inference.check",
                    ),
                ),
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
                "ordering": ["-id"],
            },
        ),
        migrations.CreateModel(
            name="TraceSession",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
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
                ("model", models.CharField(max_length=255)),
                ("server", models.CharField(max_length=40)),
                ("count", models.PositiveIntegerField()),
                ("expires_at", models.DateTimeField()),
                ("username", models.CharField(max_length=150)),
                ("ended_at", models.DateTimeField(blank=True, null=True)),
                ("ended_why", models.CharField(blank=True, max_length=120)),
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
                "ordering": ["-id"],
            },
        ),
        migrations.AddConstraint(
            model_name="check",
            constraint=models.UniqueConstraint(fields=("model", "name"), name="check_model_name"),
        ),
        migrations.AddIndex(
            model_name="checkrun",
            index=models.Index(fields=["saved_check", "server", "-id"], name="checkrun_latest"),
        ),
    ]
