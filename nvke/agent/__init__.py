"""nvke-agent: reads GPU telemetry on a node (NVML) and posts it to the control plane."""
