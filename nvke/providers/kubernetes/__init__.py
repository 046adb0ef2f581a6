"""The Kubernetes provider: clusters a tenant attaches, reached through the official `kubernetes` client.

`client` builds one API client per cluster (endpoint, bearer token, CA; timeouts and retries) and turns
the client's errors into ProviderErrors; `rbac` is what NVKE's service account may do and the manifest
that grants it; `attach` checks a cluster before it is saved; `gpus` reads GPU nodes from GFD labels and
DRA ResourceSlices; `operations` cordons, drains through the Eviction API and upgrades drivers through
the GPU Operator's NVIDIADriver objects; `infrastructure` adopts and releases nodes for node pools."""
