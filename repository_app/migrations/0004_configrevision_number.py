"""Per-model revision numbers: existing rows are numbered per model in id order."""

from django.db import migrations, models


def number_revisions(apps, schema_editor):  # type: ignore[no-untyped-def]
    revision = apps.get_model("repository_app", "ConfigRevision")
    counters: dict[str, int] = {}
    for pk, model in revision.objects.order_by("model", "id").values_list("id", "model"):
        counters[model] = counters.get(model, 0) + 1
        revision.objects.filter(pk=pk).update(number=counters[model])


class Migration(migrations.Migration):
    dependencies = [("repository_app", "0003_upload")]

    operations = [
        migrations.AddField(
            model_name="configrevision",
            name="number",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.RunPython(number_revisions, migrations.RunPython.noop),
    ]
