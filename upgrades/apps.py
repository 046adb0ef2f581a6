from django.apps import AppConfig


class UpgradesConfig(AppConfig):
    name = "upgrades"
    verbose_name = "Driver upgrades"
