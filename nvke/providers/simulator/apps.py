from django.apps import AppConfig


class SimulatorConfig(AppConfig):
    name = "nvke.providers.simulator"
    label = "simulator"
    verbose_name = "Fleet simulator"
