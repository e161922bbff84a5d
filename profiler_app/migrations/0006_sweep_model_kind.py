"""A sweep stores its model's kind as the preflight read it from the served config (e.g.
"sequence (direct)"): its page shows the kind and what the sweep took by default. Older
sweeps have none ("")."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("profiler_app", "0005_sweep_kind"),
    ]

    operations = [
        migrations.AddField(
            model_name="sweep",
            name="model_kind",
            field=models.CharField(blank=True, max_length=200),
        ),
    ]
