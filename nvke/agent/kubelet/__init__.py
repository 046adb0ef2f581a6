"""The kubelet's device-plugin API, v1beta1, for nvke-agent's device plugin (nvke/agent/device_plugin.py).

api.proto is NVKE's own statement of the wire protocol the kubelet speaks, whose definition is
kubernetes/kubernetes staging/src/k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1/api.proto (package,
services, messages and field numbers kept equal to it). api_pb2.py and api_pb2_grpc.py are generated
from it, from the repository root, with grpcio-tools 1.85.1 (the dev extra):

    python -m grpc_tools.protoc -I. --python_out=. --grpc_python_out=. nvke/agent/kubelet/api.proto

The constants are those of constants.go beside api.proto upstream."""

VERSION = "v1beta1"
DEVICE_PLUGIN_PATH = "/var/lib/kubelet/device-plugins/"
KUBELET_SOCKET = "kubelet.sock"
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
