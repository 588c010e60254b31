"""What the renderer mounts and the launcher reads: paths, file names and exit codes.

The exit codes are not written here: they come from the launcher failure table,
``flashrl_api.status.LAUNCHER_FAILURES``.

The operator's renderer and the in-pod launcher both import these constants, so the two sides of
the contract are the same objects.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from flashrl_api.status import LAUNCHER_FAILURES, Reason, exit_codes

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
#: Directory under the job's checkpoint directory where verl dumps every validation sample
#: (``trainer.validation_data_dir``), ``attempt-<k>/<step>.jsonl``; ``flashrl report --validation`` reads it.
VALIDATION_DIR: Final = "validation"

#: The launcher's exit code per failure reason, from the one table (``flashrl_api.status.LAUNCHER_FAILURES``,
#: documented in docs/launcher.md and docs/operator.md). verl's own exit code is passed through.
EXIT_CODES: Final[Mapping[Reason, int]] = MappingProxyType(exit_codes(LAUNCHER_FAILURES))


def exit_code(reason: Reason) -> int:
    """The launcher's exit code for ``reason`` (a row of ``LAUNCHER_FAILURES``)."""
    return EXIT_CODES[reason]


EXIT_OK: Final = 0
# Names for the codes the launcher's own code returns or tests compare; each is the table's.
EXIT_USAGE: Final = exit_code(Reason.LAUNCHER_USAGE)
EXIT_INVALID_CONFIG: Final = exit_code(Reason.INVALID_CONFIG)
EXIT_RAY_UNREACHABLE: Final = exit_code(Reason.RAY_UNREACHABLE)
EXIT_STOPPED_EARLY: Final = exit_code(Reason.STOPPED_EARLY)
EXIT_CHECKPOINT_UNWRITABLE: Final = exit_code(Reason.CHECKPOINT_UNWRITABLE)
EXIT_GPU_TIMEOUT: Final = exit_code(Reason.GPU_WAIT_TIMEOUT)
#: ``flashrl-launch stage`` could not stage a source; the last line is ``<cause>: <detail>``.
EXIT_STAGING_FAILED: Final = exit_code(Reason.STAGING_FAILED)
