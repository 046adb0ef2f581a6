from rest_framework import serializers

from clusters.models import Cluster, ClusterAddon, KubernetesVersion, Region


class KubernetesVersionSerializer(serializers.ModelSerializer):
    class Meta:
        model = KubernetesVersion
        fields = ["version", "enabled", "is_default", "end_of_support"]


class ClusterAddonSerializer(serializers.ModelSerializer):
    class Meta:
        model = ClusterAddon
        fields = ["name", "version", "status", "message", "updated_at"]
        read_only_fields = fields


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

    def get_node_pools(self, cluster: Cluster) -> int:
        counted = getattr(cluster, "node_pool_count", None)  # annotated on lists, absent after a create
        return cluster.node_pools.count() if counted is None else counted


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
