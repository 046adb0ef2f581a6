"""The Cluster API provider: clusters NVKE creates, provisioned by Cluster API in a management cluster.

`models` holds the management cluster setting (its kubeconfig encrypted); `management` reaches it;
`manifests` builds a cluster's Cluster, KubeadmControlPlane and infrastructure cluster and a pool's
KubeadmConfigTemplate, MachineDeployment and MachineHealthCheck (v1beta2); `status` reads their status;
`access` turns the cluster's kubeconfig Secret into NVKE's own service-account token; `infrastructure`
is the provider's infrastructure half; `watch` follows the objects' status. Operations on a provisioned
cluster (`operations`) are the Kubernetes provider's, bound to that token, plus replacing a node's
Machine and following it to its successor (a pool's Kubernetes and node image upgrades)."""
