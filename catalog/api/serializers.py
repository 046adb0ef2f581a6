from rest_framework import serializers

from catalog.models import Architecture, DriverRelease, GpuModel, KubernetesVersion, MigProfile, NodeImage


class KubernetesVersionSerializer(serializers.ModelSerializer):
    class Meta:
        model = KubernetesVersion
        fields = ["version", "enabled", "is_default", "end_of_support"]


class MigProfileSerializer(serializers.ModelSerializer):
    class Meta:
        model = MigProfile
        fields = [
            "name",
            "profile_id",
            "compute_slices",
            "memory_slices",
            "memory_mib",
            "max_instances",
            "placements",
        ]


class GpuModelSerializer(serializers.ModelSerializer):
    architecture = serializers.SlugRelatedField(slug_field="name", read_only=True)
    mig_profiles = MigProfileSerializer(many=True, read_only=True)

    class Meta:
        model = GpuModel
        fields = [
            "name",
            "display_name",
            "product_name",
            "architecture",
            "compute_capability",
            "memory_mib",
            "memory_bandwidth_gbps",
            "max_power_w",
            "form_factor",
            "nvlink",
            "nvlink_bandwidth_gbps",
            "max_gpus_per_node",
            "mig_max_instances",
            "min_driver_version",
            "mig_min_driver_version",
            "mig_profiles",
        ]


class NodeImageSerializer(serializers.ModelSerializer):
    driver_release = serializers.SlugRelatedField(slug_field="version", read_only=True, allow_null=True)

    class Meta:
        model = NodeImage
        fields = [
            "name",
            "os",
            "kernel_version",
            "container_toolkit_version",
            "driver_release",
            "release_date",
            "enabled",
            "is_default",
        ]


class DriverReleaseSerializer(serializers.ModelSerializer):
    architectures = serializers.SlugRelatedField(slug_field="name", many=True, read_only=True)

    class Meta:
        model = DriverRelease
        fields = [
            "version",
            "branch",
            "branch_type",
            "branch_end_of_life",
            "release_date",
            "cuda_version",
            "architectures",
            "enabled",
        ]


class RefusalSerializer(serializers.Serializer):
    rule = serializers.CharField()
    message = serializers.CharField()


class DriverCompatibilitySerializer(serializers.Serializer):
    driver = DriverReleaseSerializer()
    compatible = serializers.BooleanField()
    refusals = RefusalSerializer(many=True)


class ArchitectureSerializer(serializers.ModelSerializer):
    class Meta:
        model = Architecture
        fields = ["name", "compute_capabilities"]
