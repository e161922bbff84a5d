"""A job's kind is a real field: config-search jobs were Sweep rows flagged
`params["search"] = True` (and owned by a Search row); they become kind "search" and the
flag leaves their parameters. Reversible: the flag comes back."""

from django.db import migrations, models


def to_kind(apps, schema_editor):  # type: ignore[no-untyped-def]
    Sweep = apps.get_model("profiler_app", "Sweep")
    Search = apps.get_model("profiler_app", "Search")
    owned = set(Search.objects.values_list("sweep_id", flat=True))
    for job in Sweep.objects.iterator():
        if job.pk in owned or job.params.get("search"):
            params = {k: v for k, v in job.params.items() if k != "search"}
            Sweep.objects.filter(pk=job.pk).update(kind="search", params=params)


def to_flag(apps, schema_editor):  # type: ignore[no-untyped-def]
    Sweep = apps.get_model("profiler_app", "Sweep")
    for job in Sweep.objects.filter(kind="search").iterator():
        Sweep.objects.filter(pk=job.pk).update(params={**job.params, "search": True})


class Migration(migrations.Migration):
    dependencies = [
        ("profiler_app", "0004_recompute_sweep_verdicts"),
    ]

    operations = [
        migrations.AddField(
            model_name="sweep",
            name="kind",
            field=models.CharField(
                choices=[("sweep", "perf sweep"), ("search", "config search")],
                db_index=True,
                default="sweep",
                max_length=8,
            ),
        ),
        migrations.RunPython(to_kind, to_flag),
    ]
