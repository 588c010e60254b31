"""Save before the deadline: hand verl the moment ``lifecycle.activeDeadlineSeconds`` runs out.

verl 0.9.1 saves a checkpoint early when a capacity block is about to expire:
``should_save_ckpt_esi`` (``verl/utils/checkpoint/checkpoint_manager.py``) reads the Unix time in
``MLP_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP`` and answers true once the time left is below the
longest step so far + 60 s + ``trainer.esi_redundant_time``; the trainer then saves if ``save_freq > 0``.

Where that call runs decides how the variable must travel. ``main_ppo.run_ppo`` (the driver, the
launcher's child process) calls ``ray.init(runtime_env=...)`` with verl's defaults merged with
``ray_kwargs.ray_init.runtime_env`` (``verl/trainer/main_ppo.py``), then runs the trainer inside the
``TaskRunner`` Ray actor. A Ray worker process does not inherit the driver's environment; it gets the
raylet's (the pod's) plus the job's ``runtime_env.env_vars``. So the launcher sets the variable in
verl's runtime_env with the override
``++ray_kwargs.ray_init.runtime_env.env_vars.MLP_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP='<t>'``
(quoted: Ray refuses non-string env values), and in the driver's own environment as well.

Which trainers call it, in the pinned 0.9.1: the legacy ``RayPPOTrainer.fit``
(``trainer/ppo/ray_trainer.py``, ``trainer.use_v1=False``), the fully-async and the separation
trainers. The V1 trainer that ``main_ppo`` runs by default (``trainer/ppo/v1/trainer_base.py`` ``fit``)
saves only every ``save_freq`` steps and at the last step, and never calls it: with the default trainer
the checkpoint interval bounds what a deadline loses (docs/launcher.md).

The deadline counts from ``$FLASHRL_JOB_START_TIME`` (the operator sets it in the pods from the job's
start); without it, from the launcher's own start, which is later than the real start (the cluster had
to come up first), so the launcher says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final

from flashrl_api import FlashRLJob, times
from flashrl_jobs import contract

#: The variable ``should_save_ckpt_esi`` reads (verl ``utils/checkpoint/checkpoint_manager.py``).
ESI_ENV: Final = "MLP_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP"
RUNTIME_ENV_KEY: Final = f"ray_kwargs.ray_init.runtime_env.env_vars.{ESI_ENV}"


@dataclass(frozen=True)
class Deadline:
    """When the job will be stopped, and where the start it counts from came from."""

    expires: datetime
    start_source: str

    @property
    def timestamp(self) -> str:
        """Whole Unix seconds, the form ``should_save_ckpt_esi`` parses with ``float()``."""
        return str(int(self.expires.timestamp()))

    def override(self) -> str:
        """The Hydra override that puts the variable into every Ray worker of verl's job."""
        return f"++{RUNTIME_ENV_KEY}='{self.timestamp}'"


def parse_rfc3339(text: str) -> datetime | None:
    """``2026-01-02T03:04:05Z`` (or with an offset) as an aware datetime; ``None`` if it is not one."""
    return times.parse_rfc3339(text, naive_is_utc=False)


def job_deadline(job: FlashRLJob, env: Mapping[str, str], now: datetime) -> Deadline | None:
    """The job's deadline, or ``None`` when ``lifecycle.activeDeadlineSeconds`` is not set."""
    seconds = job.spec.lifecycle.active_deadline_seconds
    if seconds is None:
        return None
    raw = env.get(contract.JOB_START_ENV, "")
    start = parse_rfc3339(raw) if raw else None
    if start is not None:
        source = f"${contract.JOB_START_ENV} ({raw.strip()})"
    else:
        start = now.astimezone(UTC)
        why = "not an RFC 3339 time" if raw else "unset"
        source = f"the launcher's start (${contract.JOB_START_ENV} is {why}; the real start was earlier)"
    return Deadline(expires=start.astimezone(UTC) + timedelta(seconds=seconds), start_source=source)
