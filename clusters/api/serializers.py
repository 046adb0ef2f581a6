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
    node_pools = serializers.SerializerMethodField()
    addons = ClusterAddonSerializer(many=True, read_only=True)

    class Meta:
        model = Cluster
        fields = [
            "id",
            "name",
            "kubernetes_version",
            "region",
            "control_plane_nodes",
            "status",
            "status_reason",
            "status_message",
            "conditions",
            "endpoint",
            "node_pools",
            "addons",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["status", "status_reason", "status_message", "conditions", "endpoint"]
        validators = []  # uniqueness is the service's, answered with 409 naming the field

    def get_node_pools(self, cluster: Cluster) -> int:
        counted = getattr(cluster, "node_pool_count", None)  # annotated on lists, absent after a create
        return cluster.node_pools.count() if counted is None else counted
