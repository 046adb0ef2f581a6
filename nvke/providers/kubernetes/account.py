"""NVKE's service account on an attached cluster: where it lives, its name, and the user its token
authenticates as (what RBAC bindings and admission policies name)."""

NAMESPACE = "nvke-system"
ACCOUNT = "nvke"
USERNAME = f"system:serviceaccount:{NAMESPACE}:{ACCOUNT}"
