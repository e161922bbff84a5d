"""Sweep.server and SweepSlot.server name a server (repository_app.servers) instead of holding
its gRPC address: every existing job ran on the one server there was, `default`."""

from django.conf import settings
from django.db import migrations, models


def to_names(apps, schema_editor):  # type: ignore[no-untyped-def]
    apps.get_model("profiler_app", "Sweep").objects.update(server="default")
    slots = apps.get_model("profiler_app", "SweepSlot").objects
    # One slot per server: keep the one that holds a job (any one when none does).
    keep = slots.filter(sweep__isnull=False).first() or slots.first()
    if keep is not None:
        slots.exclude(pk=keep.pk).delete()
        slots.filter(pk=keep.pk).update(server="default")


def to_addresses(apps, schema_editor):  # type: ignore[no-untyped-def]
    addresses = dict(
        apps.get_model("repository_app", "TritonServer").objects.values_list("name", "grpc_url")
    )
    addresses["default"] = settings.TRITON_URL
    for model in ("Sweep", "SweepSlot"):
        rows = apps.get_model("profiler_app", model).objects
        for name, address in addresses.items():
            rows.filter(server=name).update(server=address)


class Migration(migrations.Migration):
    dependencies = [
        ("profiler_app", "0007_search_objectives_for_streams"),
        ("repository_app", "0007_servers"),
    ]

    operations = [
        migrations.AddField(
            model_name="sweep",
            name="server_facts",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.RunPython(to_names, to_addresses),
    ]
