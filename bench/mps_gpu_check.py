"""The MPS check for a real GPU node (issue 35), prepared and not yet run: no GPU was lent when it was
written. It starts the agent's MPS supervisor on GPU 0 with NVIDIA's `nvidia-cuda-mps-control`, runs two
CUDA clients with different limits as the device plugin's Allocate gives them, and reads NVML:

1. the supervisor's daemon answers (`get_server_list`);
2. each client (torch, when installed) allocates inside its CUDA_MPS_PINNED_DEVICE_MEM_LIMIT and fails
   past it, and reports the SM count it sees under CUDA_MPS_ACTIVE_THREAD_PERCENTAGE;
3. NVML lists both clients on the GPU while they run (nvmlDeviceGetMPSComputeRunningProcesses);
4. a killed daemon is started again by the next check.

    python bench/mps_gpu_check.py [--json]    # on the GPU node, with nvidia-ml-py (and torch for 2)"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CLIENT = """
import json, os, sys, time
try:
    import torch
except ImportError:
    print(json.dumps({"torch": False})); sys.exit(0)
limit_mib = int(os.environ["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"].split("=")[1].rstrip("M"))
seen = {"torch": True, "sms": torch.cuda.get_device_properties(0).multi_processor_count}
inside = torch.empty(limit_mib // 2 * 2**20, dtype=torch.uint8, device="cuda")
seen["inside_limit"] = True
try:
    past = torch.empty(limit_mib * 2 * 2**20, dtype=torch.uint8, device="cuda")
    seen["past_limit_refused"] = False
except RuntimeError:
    seen["past_limit_refused"] = True
print(json.dumps(seen), flush=True)
time.sleep(float(sys.argv[1]))
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    import pynvml

    from nvke.agent.mps import MpsSupervisor

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    uuid = pynvml.nvmlDeviceGetUUID(handle)
    uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
    mps = MpsSupervisor([uuid], root=tempfile.mkdtemp(prefix="mps-", dir="/tmp"))
    result: dict = {"gpu": uuid, "daemon_up": mps.check(), "daemon_error": mps.daemons[uuid].error}
    try:
        clients = []
        for percent, limit_mib in ((70, 8192), (20, 2048)):
            env = {
                **os.environ,
                "CUDA_VISIBLE_DEVICES": uuid,
                "CUDA_MPS_PIPE_DIRECTORY": mps.pipe_directory(uuid),
                "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(percent),
                "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"0={limit_mib}M",
            }
            clients.append(
                subprocess.Popen(
                    [sys.executable, "-c", CLIENT, "5"], env=env, stdout=subprocess.PIPE, text=True
                )
            )
        result["clients"] = [json.loads(c.stdout.readline() or "{}") for c in clients]
        running = pynvml.nvmlDeviceGetMPSComputeRunningProcesses(handle)
        result["nvml_mps_processes"] = sorted(p.pid for p in running)
        result["clients_pids"] = sorted(c.pid for c in clients)
        for client in clients:
            client.wait(timeout=60)
        pid_file = os.path.join(mps.pipe_directory(uuid), "nvidia-cuda-mps-control.pid")
        if os.path.exists(pid_file):
            with open(pid_file) as pid:
                os.kill(int(pid.read()), signal.SIGKILL)
            result["restarted_after_kill"] = mps.check() and mps.daemons[uuid].starts == 2
    finally:
        mps.stop()
        pynvml.nvmlShutdown()
    print(json.dumps(result, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
