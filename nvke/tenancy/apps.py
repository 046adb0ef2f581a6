from django.apps import AppConfig


class TenancyConfig(AppConfig):
    name = "nvke.tenancy"
    label = "tenancy"
    verbose_name = "Tenancy"
