"""Compute requests and limits: a fraction's compute_percent is its ceiling, and it gains a guaranteed
share. Existing claims and shares keep their meaning (guaranteed = ceiling); sharing pools take their
mode's oversubscription policy (nodepools.sharing)."""

import django.core.validators
from django.db import migrations, models
from django.db.models import F

# nodepools.sharing.MODE_DEFAULTS as of this migration: (oversubscription %, default guaranteed %).
MODE_DEFAULTS = {"time-slicing": (200, 10), "mps": (200, 10)}


def keep_meaning(apps, schema_editor):
    Claim = apps.get_model("nodepools", "Claim")
    GpuShare = apps.get_model("nodepools", "GpuShare")
    NodePool = apps.get_model("nodepools", "NodePool")
    Claim.objects.filter(kind="fraction", compute_percent__isnull=False).update(
        guaranteed_percent=F("compute_percent")
    )
    GpuShare.objects.update(guaranteed_milli=F("compute_milli"))
    for mode, (percent, guaranteed) in MODE_DEFAULTS.items():
        NodePool.objects.filter(sharing_mode=mode).update(
            compute_oversubscription_percent=percent, default_guaranteed_percent=guaranteed
        )


class Migration(migrations.Migration):
    dependencies = [("nodepools", "0005_attached_clusters")]

    operations = [
        migrations.AddField(
            model_name="nodepool",
            name="compute_oversubscription_percent",
            field=models.PositiveSmallIntegerField(
                default=100,
                help_text="Ceilings of the claims on one GPU may add up to this % (100 = no oversubscription)",
                validators=[
                    django.core.validators.MinValueValidator(100),
                    django.core.validators.MaxValueValidator(400),
                ],
            ),
        ),
        migrations.AddField(
            model_name="nodepool",
            name="default_guaranteed_percent",
            field=models.PositiveSmallIntegerField(
                blank=True,
                null=True,
                help_text="Guaranteed compute % of a fraction naming none (at most its ceiling); empty = the ceiling",
                validators=[django.core.validators.MaxValueValidator(100)],
            ),
        ),
        migrations.AddField(
            model_name="claim",
            name="guaranteed_percent",
            field=models.PositiveSmallIntegerField(
                blank=True,
                null=True,
                help_text="Fractions: guaranteed compute % (the request), at most the ceiling; empty = pool default",
                validators=[django.core.validators.MaxValueValidator(100)],
            ),
        ),
        migrations.AlterField(
            model_name="claim",
            name="compute_percent",
            field=models.PositiveSmallIntegerField(
                blank=True,
                null=True,
                help_text="Fractions: the compute ceiling (the limit)",
                validators=[
                    django.core.validators.MinValueValidator(1),
                    django.core.validators.MaxValueValidator(100),
                ],
            ),
        ),
        migrations.AddField(
            model_name="gpushare",
            name="guaranteed_milli",
            field=models.PositiveSmallIntegerField(
                default=0, validators=[django.core.validators.MaxValueValidator(1000)]
            ),
            preserve_default=False,
        ),
        migrations.RunPython(keep_meaning, migrations.RunPython.noop),
    ]
