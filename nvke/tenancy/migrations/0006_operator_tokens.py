import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("tenancy", "0005_catalog_app"),
    ]

    # A token without a tenant is an operator's (nvke/tenancy/models.py, ApiToken).
    operations = [
        migrations.AlterField(
            model_name="apitoken",
            name="tenant",
            field=models.ForeignKey(
                blank=True,
                help_text="Empty: an operator token (a staff user's, for the fleet endpoints)",
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="tokens",
                to="tenancy.tenant",
            ),
        ),
    ]
