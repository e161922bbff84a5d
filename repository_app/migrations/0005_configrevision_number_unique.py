"""One number per model and revision (apart from the data migration: PostgreSQL refuses an
ALTER TABLE in the transaction that just updated the rows)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("repository_app", "0004_configrevision_number")]

    operations = [
        migrations.AddConstraint(
            model_name="configrevision",
            constraint=models.UniqueConstraint(
                fields=("model", "number"), name="configrev_model_number"
            ),
        ),
    ]
