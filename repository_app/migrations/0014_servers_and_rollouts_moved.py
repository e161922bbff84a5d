"""TritonServer moved to the registry app, Rollout and RolloutTarget to the fleet app: their
tables stay, only the state moves (registry and fleet 0001 take them)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("repository_app", "0013_publishjob"),
        ("registry", "0001_initial"),
        ("fleet", "0001_initial"),
        # Older migrations of other apps read repository_app.TritonServer: they run first.
        ("team", "0005_audit_concerns"),
        ("profiler_app", "0008_sweep_server_name"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveField(
                    model_name="rollout",
                    name="user",
                ),
                migrations.RemoveField(
                    model_name="rollouttarget",
                    name="rollout",
                ),
                migrations.DeleteModel(
                    name="TritonServer",
                ),
                migrations.DeleteModel(
                    name="Rollout",
                ),
                migrations.DeleteModel(
                    name="RolloutTarget",
                ),
            ],
        ),
    ]
