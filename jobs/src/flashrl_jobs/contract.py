"""What the renderer mounts and the launcher reads: paths, file names and exit codes.

The operator's renderer and the in-pod launcher both import these constants, so the two sides of
the contract are the same objects.
"""

from __future__ import annotations

from typing import Final

#: Directory where the renderer mounts the job's ConfigMap in the Ray head pod.
SPEC_DIR: Final = "/etc/flashrl"
#: The validated FlashRLJob (metadata + defaulted spec) as YAML.
SPEC_FILE: Final = "flashrljob.yaml"
#: The exact verl overrides, a JSON list of ``key=value`` strings.
OVERRIDES_FILE: Final = "verl-overrides.json"
#: Default ``--spec`` of ``flashrl-launch``.
DEFAULT_SPEC_PATH: Final = f"{SPEC_DIR}/{SPEC_FILE}"
#: Environment variable that overrides the default spec path.
SPEC_ENV: Final = "FLASHRL_SPEC"
#: Where a failing launcher writes its reason (Kubernetes termination message).
TERMINATION_LOG: Final = "/dev/termination-log"
TERMINATION_LOG_ENV: Final = "FLASHRL_TERMINATION_LOG"

#: Which attempt (Ray cluster) of the job this is, from 1; the operator sets it in every Ray pod.
ATTEMPT_ENV: Final = "FLASHRL_ATTEMPT"
#: RFC 3339 time from which ``lifecycle.activeDeadlineSeconds`` counts; the operator sets it in the pods.
JOB_START_ENV: Final = "FLASHRL_JOB_START_TIME"

#: ``/metrics`` of the running job on the head pod: port variable, default and containerPort name. The
#: default is clear of Ray's head ports (6379 GCS, 8265 dashboard, 10001 client, 8080 metrics export,
#: 52365 dashboard agent, 8000 Serve), the DCGM exporter's 9400 and node-exporter's 9100.
METRICS_PORT_ENV: Final = "FLASHRL_METRICS_PORT"
DEFAULT_METRICS_PORT: Final = 9450
#: At most 15 characters (a Kubernetes port name); the chart's PodMonitor scrapes the port by this name.
METRICS_PORT_NAME: Final = "flashrl-metrics"
#: Directory under the job's checkpoint directory where verl's file logger writes, one file per attempt.
METRICS_DIR: Final = "metrics"

# Launcher exit codes (documented in docs/launcher.md). verl's own exit code is passed through.
EXIT_OK: Final = 0
EXIT_USAGE: Final = 64
EXIT_INVALID_CONFIG: Final = 65
EXIT_RAY_UNREACHABLE: Final = 69
#: verl exited 0 before the last training step (a resume that ran no step, an early stop).
EXIT_STOPPED_EARLY: Final = 70
#: The checkpoint directory cannot be written (read-only claim, full volume).
EXIT_CHECKPOINT_UNWRITABLE: Final = 73
EXIT_GPU_TIMEOUT: Final = 75
#: ``flashrl-launch stage`` could not stage a source; the last line is ``<cause>: <detail>``.
EXIT_STAGING_FAILED: Final = 76
