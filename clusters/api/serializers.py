from rest_framework import serializers

from catalog.models import KubernetesVersion, Region
from clusters.models import Cluster, ClusterAddon
from nvke.api.documents import document_type, plain


class ClusterAddonSerializer(serializers.ModelSerializer):
    class Meta:
        model = ClusterAddon
        fields = ["name", "version", "status", "message", "updated_at"]
        read_only_fields = fields

    def to_representation(self, addon: ClusterAddon) -> dict:
        return plain(addon_document(addon))


class ClusterSerializer(serializers.ModelSerializer):
    kubernetes_version = serializers.SlugRelatedField(
        slug_field="version", queryset=KubernetesVersion.objects.filter(enabled=True)
    )
    region = serializers.SlugRelatedField(slug_field="name", queryset=Region.objects.filter(enabled=True))
    control_plane_nodes = serializers.ChoiceField(choices=[(1, "1"), (3, "3 (highly available)")])
    node_pools = serializers.SerializerMethodField()
    addons = ClusterAddonSerializer(many=True, read_only=True)
    observed = serializers.JSONField(
        read_only=True, help_text="Attached clusters: version, features, GPU stack and GPU nodes found."
    )

    class Meta:
        model = Cluster
        fields = [
            "id",
            "name",
            "attached",
            "kubernetes_version",
            "region",
            "control_plane_nodes",
            "status",
            "status_reason",
            "status_message",
            "conditions",
            "endpoint",
            "observed",
            "node_pools",
            "addons",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["attached", "status", "status_reason", "status_message", "conditions", "endpoint"]
        validators = []  # uniqueness is the service's, answered with 409 naming the field

    def to_representation(self, cluster: Cluster) -> dict:
        """The declared fields' Struct filled by hand: a read then builds none of the fields (DRF built
        them for every request, most of a cheap read's serializer time). tests/nvke/api/
        test_read_documents.py holds it to DRF's walk."""
        return plain(
            ClusterDocument(
                id=cluster.pk,
                name=cluster.name,
                attached=cluster.attached,
                kubernetes_version=cluster.kubernetes_version and cluster.kubernetes_version.version,
                region=cluster.region and cluster.region.name,
                control_plane_nodes=cluster.control_plane_nodes,
                status=cluster.status,
                status_reason=cluster.status_reason,
                status_message=cluster.status_message,
                conditions=cluster.conditions,
                endpoint=cluster.endpoint,
                observed=cluster.observed,
                node_pools=self.get_node_pools(cluster),
                addons=[addon_document(addon) for addon in cluster.addons.all()],
                created_at=cluster.created_at,
                updated_at=cluster.updated_at,
            )
        )

    def get_node_pools(self, cluster: Cluster) -> int:
        counted = getattr(cluster, "node_pool_count", None)  # annotated on lists, absent after a create
        return cluster.node_pools.count() if counted is None else counted


# The documents (nvke.api.documents): the declared fields as Structs, answered through serializer.data.
ClusterAddonDocument = document_type(ClusterAddonSerializer)
ClusterDocument = document_type(ClusterSerializer)


def addon_document(addon: ClusterAddon) -> ClusterAddonDocument:
    return ClusterAddonDocument(
        name=addon.name,
        version=addon.version,
        status=addon.status,
        message=addon.message,
        updated_at=addon.updated_at,
    )


class AttachClusterSerializer(serializers.Serializer):
    """An existing cluster to attach: a kubeconfig (its current context, with a bearer token), or the API
    endpoint, a bearer token and the CA bundle that signs the endpoint's certificate."""

    name = serializers.CharField(max_length=63)
    kubeconfig = serializers.CharField(required=False, write_only=True, trim_whitespace=False)
    endpoint = serializers.URLField(required=False, help_text="https:// URL of the API server")
    token = serializers.CharField(required=False, write_only=True)
    ca_bundle = serializers.CharField(
        required=False, write_only=True, allow_blank=True, trim_whitespace=False
    )

    def validate(self, data: dict) -> dict:
        if data.get("kubeconfig"):
            if data.get("endpoint") or data.get("token"):
                raise serializers.ValidationError(
                    {"kubeconfig": "Give a kubeconfig or endpoint and token, not both."}
                )
            return data
        missing = {
            field: "Required without a kubeconfig." for field in ("endpoint", "token") if not data.get(field)
        }
        if missing:
            raise serializers.ValidationError(missing)
        return data
