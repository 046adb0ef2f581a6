"""nvke-agent: reads GPU telemetry on a node (NVML) and posts it to the control plane; with
--device-plugin it is also NVKE's device plugin, with --mps the MPS daemons' supervisor."""
