from django import forms
from django.contrib import admin

from nvke.providers.base import ProviderError

from . import kubeconfig
from .models import MachineReplacement, ManagementCluster


class ManagementClusterForm(forms.ModelForm):
    """The kubeconfig is write-only: the page never shows it, and leaving it empty keeps the stored one.
    A new one must be one NVKE can use as it is (kubeconfig.parse: inline credentials only, nothing run
    or read from disk, a server the address policy admits); a refusal names what is wrong."""

    kubeconfig = forms.CharField(
        required=False,
        strip=False,
        widget=forms.Textarea(
            attrs={"placeholder": "Stored and never shown. Paste a kubeconfig to replace it."}
        ),
        help_text=ManagementCluster._meta.get_field("kubeconfig").help_text,
    )

    class Meta:
        model = ManagementCluster
        fields = [
            "kubeconfig",
            "namespace",
            "infrastructure_api_version",
            "cluster_template",
            "control_plane_machine_template",
            "kubernetes_versions",
        ]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.initial["kubeconfig"] = ""

    def clean_kubeconfig(self) -> str:
        text = self.cleaned_data["kubeconfig"]
        if not text.strip():
            return self.instance.kubeconfig if self.instance.pk else ""
        try:
            kubeconfig.api_client(text)
        except ProviderError as error:
            raise forms.ValidationError(error.message, code="invalid_kubeconfig") from None
        return text


@admin.register(ManagementCluster)
class ManagementClusterAdmin(admin.ModelAdmin):
    form = ManagementClusterForm
    list_display = ("__str__", "infrastructure_api_version", "cluster_template", "updated_at")

    def has_add_permission(self, request) -> bool:
        return not ManagementCluster.objects.exists()  # one management cluster


@admin.register(MachineReplacement)
class MachineReplacementAdmin(admin.ModelAdmin):
    """Read-only: what a run's Kubernetes or image upgrade had Cluster API replace."""

    list_display = ("cluster", "node", "deployment", "created_at")
    list_filter = ("cluster",)
    readonly_fields = ("cluster", "node", "deployment", "machines_before", "created_at")

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
