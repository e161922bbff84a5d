"""Stored sweeps get the verdict of today's rules: knee and recommendation from the levels
that settled, the caveat naming those that did not, and no "try higher loads" for a
sweep that did not finish (see profiler_app.verdict). Only the summary changes: every
measured point stays as it was. Config-search carriers keep their own summary."""

from django.db import migrations

FINISHED = ("succeeded", "failed", "cancelled", "interrupted")


def recompute(apps, schema_editor):  # type: ignore[no-untyped-def]
    # The rules themselves, not a copy: the summary is a reading of the stored points, and
    # they read the historical rows given here (only their field values).
    from profiler_app import sweeps, verdict

    Sweep = apps.get_model("profiler_app", "Sweep")
    SweepPoint = apps.get_model("profiler_app", "SweepPoint")
    for sweep in Sweep.objects.filter(state__in=FINISHED).iterator():
        if sweep.params.get("search"):
            continue
        try:
            params = sweeps.params_of(sweep)
            points = list(SweepPoint.objects.filter(sweep_id=sweep.pk, window=-1))
            summary = verdict.summarize(points, params, sweep.state)
        except Exception:  # noqa: BLE001 - a row the rules cannot read keeps its summary
            continue
        Sweep.objects.filter(pk=sweep.pk).update(summary=summary)


class Migration(migrations.Migration):
    dependencies = [
        ("profiler_app", "0003_sweep_name_note_search_rounds"),
    ]

    operations = [migrations.RunPython(recompute, migrations.RunPython.noop)]
