from django.urls import include, path
from rest_framework.routers import DefaultRouter

from audit.api.views import AuditEntryViewSet
from catalog.api.views import (
    DriverReleaseViewSet,
    GpuModelViewSet,
    KubernetesVersionViewSet,
    NodeImageViewSet,
)
from claims.api.claims import ClaimViewSet
from claims.api.defrag import ClusterDefragViewSet
from claims.api.groups import ClaimGroupViewSet
from claims.api.queues import QueueViewSet
from claims.api.quota import quota
from claims.api.usage import usage_export, usage_report
from clusters.api.views import ClusterViewSet
from nodepools.api.views import NodePoolViewSet, NodeViewSet, RegionViewSet
from nvke.tenancy.api.views import (
    ApiTokenViewSet,
    InvitationViewSet,
    MembershipViewSet,
    MyInvitationViewSet,
    OperatorTokenViewSet,
    me,
)
from telemetry.api.views import (
    ClaimScalingViewSet,
    ClusterAgentViewSet,
    GpuTelemetryViewSet,
    IngestView,
    InventoryView,
    NodeTokenViewSet,
    PoolRescalingViewSet,
    PreflightView,
    TelemetryEventViewSet,
)
from upgrades.api.fleet import fleet
from upgrades.api.views import (
    ClusterMaintenanceViewSet,
    ClusterVersionsViewSet,
    DriverOptionsView,
    FleetRolloutViewSet,
    PoolUpgradeDeferralViewSet,
    UpgradeRunViewSet,
)

router = DefaultRouter()
# Before the clusters' own viewset: the API root lists the last registration of a prefix.
router.register("clusters", ClusterDefragViewSet, basename="cluster-defrag")
router.register("clusters", ClusterAgentViewSet, basename="cluster-agent")
router.register("clusters", ClusterMaintenanceViewSet, basename="cluster-maintenance")
router.register("clusters", ClusterVersionsViewSet, basename="cluster-versions")
router.register("clusters", ClusterViewSet)
router.register("node-pools", PoolUpgradeDeferralViewSet, basename="pool-upgrade-deferral")
router.register("node-pools", NodePoolViewSet)
router.register("nodes", NodeViewSet)
router.register("gpu-models", GpuModelViewSet)
router.register("driver-releases", DriverReleaseViewSet)
router.register("kubernetes-versions", KubernetesVersionViewSet)
router.register("node-images", NodeImageViewSet)
router.register("regions", RegionViewSet)
router.register("claims", ClaimViewSet)
router.register("claim-groups", ClaimGroupViewSet)
router.register("queues", QueueViewSet)
router.register("tokens", ApiTokenViewSet)
router.register("operator-tokens", OperatorTokenViewSet, basename="operator-token")
router.register("telemetry/node-tokens", NodeTokenViewSet)
router.register("telemetry/gpus", GpuTelemetryViewSet, basename="telemetry-gpu")
router.register("telemetry/events", TelemetryEventViewSet)
router.register("telemetry/claim-scaling", ClaimScalingViewSet)
router.register("telemetry/pool-rescaling", PoolRescalingViewSet, basename="pool-rescaling")
router.register("members", MembershipViewSet)
router.register("invitations", InvitationViewSet)
router.register("me/invitations", MyInvitationViewSet, basename="my-invitation")
router.register("audit", AuditEntryViewSet)

router.register("upgrades", UpgradeRunViewSet)
router.register("fleet-rollouts", FleetRolloutViewSet)

urlpatterns = [
    path("me/", me, name="me"),
    path("fleet/", fleet, name="fleet"),
    path("telemetry/ingest/", IngestView.as_view(), name="telemetry-ingest"),
    path("telemetry/inventory/", InventoryView.as_view(), name="telemetry-inventory"),
    path("telemetry/preflight/", PreflightView.as_view(), name="telemetry-preflight"),
    path("quota/", quota, name="quota"),
    path("usage/", usage_report, name="usage"),
    path("usage/export/", usage_export, name="usage-export"),
    path("node-pools/<int:pk>/driver-options/", DriverOptionsView.as_view(), name="driver-options"),
    path("", include(router.urls)),
]
