"""Content types and audit entries follow the models to their new apps: permissions granted on a moved
model stay granted (they hang on its content type), and the audit log names every entry of a model the
same way (`app_label.model`), before and after the move."""

from django.db import migrations

MOVED = {
    "catalog": {
        "nodepools": ["architecture", "gpumodel", "migprofile", "driverrelease", "nodeimage", "regioninventory"],
        "clusters": ["kubernetesversion", "region"],
    },
    "claims": {"nodepools": ["claim", "allocation", "gpushare", "allocationevent", "usageinterval"]},
}


def relabel(apps, schema_editor, forward=True):
    ContentType = apps.get_model("contenttypes", "ContentType")
    AuditEntry = apps.get_model("audit", "AuditEntry")
    for new_app, sources in MOVED.items():
        for old_app, models in sources.items():
            source, target = (old_app, new_app) if forward else (new_app, old_app)
            ContentType.objects.filter(app_label=source, model__in=models).update(app_label=target)
            for model in models:
                AuditEntry.objects.filter(object_type=f"{source}.{model}").update(object_type=f"{target}.{model}")


def relabel_back(apps, schema_editor):
    relabel(apps, schema_editor, forward=False)


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0001_initial"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("catalog", "0001_initial"),
        ("claims", "0001_initial"),
        ("clusters", "0009_catalog_app"),
        ("nodepools", "0019_catalog_and_claims_apps"),
    ]

    operations = [migrations.RunPython(relabel, relabel_back)]
