"""A rollout's targets become jobs of the one lifecycle (`jobs.lifecycle`): they gain its
fields (queue, heartbeat, worker, cancel, attempts), "pending" becomes "queued", and the
rollout no longer names the process that ran it (any worker's watchdog reaps a target)."""

from django.db import migrations, models


def pending_to_queued(apps, schema_editor):  # type: ignore[no-untyped-def]
    target = apps.get_model("repository_app", "RolloutTarget")
    target.objects.filter(state="pending").update(state="queued")
    for row in target.objects.select_related("rollout").filter(queued_at__isnull=True):
        target.objects.filter(pk=row.pk).update(queued_at=row.rollout.created_at)


def queued_to_pending(apps, schema_editor):  # type: ignore[no-untyped-def]
    target = apps.get_model("repository_app", "RolloutTarget")
    target.objects.filter(state="queued").update(state="pending")
    target.objects.filter(state__in=("cancelled", "interrupted")).update(state="failed")


class Migration(migrations.Migration):
    dependencies = [("repository_app", "0010_rollouttarget_labels")]

    operations = [
        migrations.RemoveField(model_name="rollout", name="runner"),
        migrations.RenameField(
            model_name="rollouttarget", old_name="ended_at", new_name="finished_at"
        ),
        migrations.AlterField(
            model_name="rollouttarget",
            name="state",
            field=models.CharField(
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
        migrations.AddField(
            model_name="rollouttarget",
            name="cancel_requested",
            field=models.BooleanField(default=False),
        ),
        migrations.AddField(
            model_name="rollouttarget",
            name="queued_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="rollouttarget",
            name="dispatched_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="rollouttarget",
            name="heartbeat_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="rollouttarget",
            name="attempts",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="rollouttarget", name="error", field=models.TextField(blank=True)
        ),
        migrations.AddField(
            model_name="rollouttarget",
            name="queue",
            field=models.CharField(blank=True, max_length=255),
        ),
        migrations.AddField(
            model_name="rollouttarget", name="routing", field=models.TextField(blank=True)
        ),
        migrations.AddField(
            model_name="rollouttarget",
            name="waiting_for_worker",
            field=models.BooleanField(default=False),
        ),
        migrations.AddField(
            model_name="rollouttarget",
            name="worker",
            field=models.CharField(blank=True, max_length=255),
        ),
        migrations.AddField(
            model_name="rollouttarget",
            name="worker_host",
            field=models.CharField(blank=True, max_length=255),
        ),
        migrations.RunPython(pending_to_queued, queued_to_pending),
    ]
