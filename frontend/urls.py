from django.contrib.auth import views as auth_views
from django.urls import path

from . import views, views_account, views_rollouts, views_telemetry, views_upgrades, views_usage
from .sign_in import SignInView

urlpatterns = [
    path("login/", SignInView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),  # POST only (Django 5)
    path("", views.dashboard, name="dashboard"),
    path("clusters/", views.cluster_list, name="cluster-list"),
    path("clusters/new/", views.cluster_create, name="cluster-create"),
    path("clusters/attach/", views.cluster_attach, name="cluster-attach"),
    path("clusters/attach/rbac.yaml", views.cluster_rbac_manifest, name="cluster-rbac-manifest"),
    path("clusters/<int:pk>/", views.cluster_detail, name="cluster-detail"),
    path("clusters/<int:pk>/kubeconfig/", views.cluster_kubeconfig, name="cluster-kubeconfig"),
    path("clusters/<int:pk>/agent-manifest/", views.cluster_agent_manifest, name="cluster-agent-manifest"),
    path("clusters/<int:pk>/delete/", views.cluster_delete, name="cluster-delete"),
    path("clusters/<int:pk>/pools/new/", views.pool_create, name="pool-create"),
    path("pools/<int:pk>/", views.pool_detail, name="pool-detail"),
    path("pools/<int:pk>/scale/", views.pool_scale, name="pool-scale"),
    path("pools/<int:pk>/rescaling/", views.pool_rescaling, name="pool-rescaling"),
    path("pools/<int:pk>/delete/", views.pool_delete, name="pool-delete"),
    path("nodes/<int:pk>/", views.node_detail, name="node-detail"),
    path("clusters/<int:pk>/claims/", views.claim_list, name="claim-list"),
    path("clusters/<int:pk>/claims/new/", views.claim_create, name="claim-create"),
    path("claims/<int:pk>/", views.claim_detail, name="claim-detail"),
    path("claims/<int:pk>/release/", views.claim_release, name="claim-release"),
    path("tenant/switch/", views.tenant_switch, name="tenant-switch"),
    path("telemetry/", views_telemetry.fleet, name="telemetry"),
    path("usage/", views_usage.usage_page, name="usage-page"),
    path("telemetry/clusters/<int:pk>/", views_telemetry.cluster, name="telemetry-cluster"),
    path("telemetry/pools/<int:pk>/", views_telemetry.pool, name="telemetry-pool"),
    path("telemetry/gpus/<int:pk>/", views_telemetry.gpu, name="telemetry-gpu"),
    path("account/tokens/", views_account.token_list, name="account-tokens"),
    path("account/tokens/<int:pk>/revoke/", views_account.token_revoke, name="account-token-revoke"),
    path("account/members/", views_account.member_list, name="account-members"),
    path("account/members/<int:pk>/role/", views_account.member_role, name="account-member-role"),
    path("account/members/<int:pk>/remove/", views_account.member_remove, name="account-member-remove"),
    path("account/audit/", views_account.audit_log, name="account-audit"),
    path("pools/<int:pk>/upgrade/", views_upgrades.pool_upgrade, name="pool-upgrade"),
    path("upgrades/<int:pk>/", views_upgrades.upgrade_detail, name="upgrade-detail"),
    path(
        "upgrades/<int:pk>/nodes/<str:node>/uncordon/",
        views_upgrades.upgrade_node_uncordon,
        name="upgrade-node-uncordon",
    ),
    path("upgrades/<int:pk>/<str:action>/", views_upgrades.upgrade_control, name="upgrade-control"),
    path("fleet-rollouts/", views_rollouts.rollout_list, name="rollout-list"),
    path("fleet-rollouts/new/", views_rollouts.rollout_create, name="rollout-create"),
    path("fleet-rollouts/<int:pk>/", views_rollouts.rollout_detail, name="rollout-detail"),
    path("fleet-rollouts/<int:pk>/runs/<int:run_pk>/", views_rollouts.rollout_run, name="rollout-run"),
    path(
        "fleet-rollouts/<int:pk>/runs/<int:run_pk>/<str:action>/",
        views_rollouts.rollout_run_control,
        name="rollout-run-control",
    ),
    path("fleet-rollouts/<int:pk>/<str:action>/", views_rollouts.rollout_control, name="rollout-control"),
]
