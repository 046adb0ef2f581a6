"""The MPS control daemon of each GPU on an MPS pool's node, started and kept running by nvke-agent.

Each GPU gets its own daemon (`nvidia-cuda-mps-control -d`, which forks into the background and
returns) with CUDA_VISIBLE_DEVICES set to that GPU and pipe and log directories of its own, so a
container is pointed at its GPU's daemon by CUDA_MPS_PIPE_DIRECTORY (the device plugin's Allocate).
Whether a daemon is up is asked of the daemon itself: `get_server_list` through the control client
succeeds only while it answers on its pipe. One that does not is started again, and counted."""

import logging
import os
import subprocess
from dataclasses import dataclass, field

log = logging.getLogger("nvke-agent")
COMMAND = "nvidia-cuda-mps-control"
ROOT = "/run/nvke/mps"
# The daemons' /dev/shm, which MPS clients must share with them: a host directory under /run (memory
# backed) mounted as /dev/shm into the agent and, by the device plugin's Allocate, into every MPS client,
# as NVIDIA/k8s-device-plugin does with `<mps root>/shm` (internal/plugin/mps.go updateReponse,
# cmd/mps-control-daemon/mps/root.go ShmDir; its daemon's DaemonSet mounts it at /dev/shm).
SHM = os.path.join(ROOT, "shm")
SHM_MOUNT = "/dev/shm"
TIMEOUT_S = 10.0


@dataclass
class Daemon:
    uuid: str
    up: bool = False
    starts: int = 0
    error: str = ""


@dataclass
class MpsSupervisor:
    uuids: list[str]
    root: str = ROOT
    command: str = COMMAND
    daemons: dict[str, Daemon] = field(init=False)

    def __post_init__(self) -> None:
        self.daemons = {uuid: Daemon(uuid) for uuid in self.uuids}

    def pipe_directory(self, uuid: str) -> str:
        return os.path.join(self.root, uuid, "pipe")

    def _env(self, uuid: str) -> dict[str, str]:
        logs = os.path.join(self.root, uuid, "log")
        for path in (self.pipe_directory(uuid), logs):
            os.makedirs(path, exist_ok=True)
        return {
            **os.environ,
            "CUDA_VISIBLE_DEVICES": uuid,
            "CUDA_MPS_PIPE_DIRECTORY": self.pipe_directory(uuid),
            "CUDA_MPS_LOG_DIRECTORY": logs,
        }

    def _control(self, uuid: str, args: list[str], stdin: str = "") -> subprocess.CompletedProcess:
        return subprocess.run(
            [self.command, *args],
            input=stdin,
            env=self._env(uuid),
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )

    def answers(self, uuid: str) -> bool:
        try:
            return self._control(uuid, [], "get_server_list\n").returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False

    def check(self) -> bool:
        """Start every daemon that does not answer; True when all answer."""
        for uuid, daemon in self.daemons.items():
            if self.answers(uuid):
                daemon.up, daemon.error = True, ""
                continue
            if daemon.up:
                log.warning("MPS control daemon of %s stopped answering; starting it again", uuid)
            daemon.starts += 1
            try:
                started = self._control(uuid, ["-d"])
                failed = f"exit status {started.returncode}" if started.returncode else ""
                daemon.error = started.stderr.strip() or failed
            except (OSError, subprocess.TimeoutExpired) as error:
                daemon.error = str(error)
            daemon.up = self.answers(uuid)
            if not daemon.up:
                log.error("MPS control daemon of %s does not start: %s", uuid, daemon.error or "no answer")
        return self.up()

    def up(self, uuid: str | None = None) -> bool:
        if uuid is not None:
            return uuid in self.daemons and self.daemons[uuid].up
        return bool(self.daemons) and all(d.up for d in self.daemons.values())

    def stop(self) -> None:
        for uuid in self.daemons:
            try:
                self._control(uuid, [], "quit\n")
            except (OSError, subprocess.TimeoutExpired):
                pass
