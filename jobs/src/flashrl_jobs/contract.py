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

# Launcher exit codes (documented in docs/launcher.md). verl's own exit code is passed through.
EXIT_OK: Final = 0
EXIT_USAGE: Final = 64
EXIT_INVALID_CONFIG: Final = 65
EXIT_RAY_UNREACHABLE: Final = 69
EXIT_GPU_TIMEOUT: Final = 75
