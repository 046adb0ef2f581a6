"""Queues API: a cluster's queues with their nominal GPU quota per model, cohort, borrowing and lending
limits (create, list, read, change, delete), each read with how it stands (`admission.standing`).
Cohorts are not objects of their own: queues of one cluster that carry the same `cohort` name form
one. Another tenant's queues are a 404."""

from django.db import IntegrityError, transaction
from drf_spectacular.utils import extend_schema_field
from rest_framework import mixins, serializers

from catalog.models import GpuModel
from claims import allocator
from claims.allocator import admission
from claims.models import Queue
from clusters.models import Cluster
from nvke.api.filters import IntegerFilter, StrictFilterSet
from nvke.api.viewsets import TenantScopedViewSet
from nvke.errors import Conflict
from nvke.models import dns_label
from nvke.tenancy.context import resolve_tenant


class QueueQuotaSerializer(serializers.Serializer):
    gpu_model = serializers.CharField(max_length=48, help_text="A GPU model's name (gpu-models/)")
    gpus = serializers.IntegerField(min_value=0, max_value=100_000, help_text="Nominal whole GPUs")
    gpu_memory_mib = serializers.IntegerField(
        min_value=0,
        required=False,
        allow_null=True,
        help_text="Nominal GPU memory (fractions and MIG slices count memory only); default: its GPUs'",
    )
    borrowing_limit = serializers.IntegerField(
        min_value=0, required=False, allow_null=True, help_text="GPUs it may borrow past nominal; null: any"
    )
    lending_limit = serializers.IntegerField(
        min_value=0, required=False, allow_null=True, help_text="GPUs of its nominal it lends; null: all"
    )

    def validate_gpu_model(self, value: str) -> str:
        if not GpuModel.objects.filter(name=value).exists():
            raise serializers.ValidationError(f"No GPU model named {value!r}.", code="unknown")
        return value

    def validate(self, data: dict) -> dict:
        if (data.get("lending_limit") or 0) > data["gpus"]:
            raise serializers.ValidationError(
                {"lending_limit": f"At most its nominal GPUs ({data['gpus']})."}
            )
        return data


class FiguresSerializer(serializers.Serializer):
    nominal = serializers.IntegerField()
    used = serializers.IntegerField()
    borrowed = serializers.IntegerField(help_text="Used past nominal, out of the cohort's lending")
    lent = serializers.IntegerField(help_text="Of its nominal, what other queues of the cohort use now")
    available = serializers.IntegerField(help_text="What it may still admit")


class ModelStandingSerializer(serializers.Serializer):
    gpu_model = serializers.CharField()
    gpus = FiguresSerializer()
    gpu_memory_mib = FiguresSerializer()


class PendingSerializer(serializers.Serializer):
    priority = serializers.IntegerField()
    claims = serializers.IntegerField()
    gpus = serializers.IntegerField()


class StandingSerializer(serializers.Serializer):
    models = ModelStandingSerializer(many=True)
    share = serializers.FloatField(help_text="Dominant share of what it borrows (fair sharing orders by it)")
    pending = PendingSerializer(many=True, help_text="Pending claims by priority, highest first")


class QueueSerializer(serializers.ModelSerializer):
    cluster = serializers.PrimaryKeyRelatedField(queryset=Cluster.objects.none())
    name = serializers.CharField(max_length=63, validators=[dns_label])
    namespaces = serializers.ListField(
        child=serializers.CharField(max_length=63, validators=[dns_label]),
        required=False,
        max_length=100,
        help_text="Claims in these namespaces fall to it when they name no queue",
    )
    cohort = serializers.CharField(
        max_length=63, required=False, allow_blank=True, validators=[dns_label], help_text="Its cohort's name"
    )
    quotas = QueueQuotaSerializer(many=True, required=False)
    standing = serializers.SerializerMethodField()

    class Meta:
        model = Queue
        fields = ["id", "cluster", "name", "namespaces", "cohort", "quotas", "standing", "created_at"]
        validators = []  # uniqueness is answered with 409 naming the field

    def get_fields(self) -> dict:
        fields = super().get_fields()
        request = self.context.get("request")
        if request is not None:
            fields["cluster"].queryset = Cluster.objects.restrict(resolve_tenant(request))
        return fields

    def validate_quotas(self, value: list[dict]) -> list[dict]:
        models = [entry["gpu_model"] for entry in value]
        if len(set(models)) != len(models):
            raise serializers.ValidationError("One entry per GPU model.", code="duplicate")
        return value

    def validate(self, data: dict) -> dict:
        cluster = data.get("cluster") or self.instance.cluster
        if self.instance is not None and data.get("cluster", cluster) != self.instance.cluster:
            raise serializers.ValidationError({"cluster": "A queue stays in its cluster."}, code="immutable")
        for namespace in data.get("namespaces", []):
            taken = admission.queue_for(cluster.pk, namespace)
            if taken is not None and taken != self.instance:
                raise serializers.ValidationError(
                    {"namespaces": f"Namespace {namespace} falls to queue {taken} already."}, code="taken"
                )
        return data

    @extend_schema_field(StandingSerializer)
    def get_standing(self, queue: Queue) -> dict:
        standings = self.context.setdefault("standings", {})
        if queue.cluster_id not in standings:  # a page of queues: one reading per cluster
            standings[queue.cluster_id] = admission.standing(
                list(Queue.objects.filter(cluster_id=queue.cluster_id))
            )
        return standings[queue.cluster_id][queue.pk]

    def save(self, **kwargs) -> Queue:
        try:
            with transaction.atomic():
                return super().save(**kwargs)
        except IntegrityError:
            raise Conflict(
                f"The cluster already has a queue named {self.validated_data['name']}.",
                field="name",
                code="duplicate",
            ) from None


class QueueFilter(StrictFilterSet):
    cluster = IntegerFilter()

    class Meta:
        model = Queue
        fields = ["cluster", "cohort"]


class QueueViewSet(
    mixins.CreateModelMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
    TenantScopedViewSet,
):
    """Queues of a cluster: a nominal quota per GPU model (whole GPUs, and GPU memory for fractions), a
    cohort whose queues lend each other what they leave unused (up to a lending limit) and borrow it
    (up to a borrowing limit), fair sharing of what is borrowed by dominant share, and reclaim: a queue
    asking for its nominal quota back preempts borrowed claims in its cohort. A claim names its queue
    or falls to its namespace's; the tenant's quotas stay the outer bound. Deleting a queue leaves its
    claims without one."""

    queryset = Queue.objects.order_by("cluster_id", "name")
    serializer_class = QueueSerializer
    filterset_class = QueueFilter

    # Pending claims get another try whenever quotas change: a queue's room may have grown.
    def perform_create(self, serializer: QueueSerializer) -> None:
        queue = serializer.save(tenant=self.tenant_context.tenant)
        allocator.request_placement(queue.cluster_id)

    def perform_update(self, serializer: QueueSerializer) -> None:
        allocator.request_placement(serializer.save().cluster_id)

    def perform_destroy(self, instance: Queue) -> None:
        instance.delete()
        allocator.request_placement(instance.cluster_id)
