"""A job's verl configuration checked before anything runs: one rule set for ``flashrl validate``,
the demo and the operator.

Two layers, each with one reason to exist:

- overrides that name code for Hydra, reach the reserved environment, or set a key another spec field
  owns are refused at ``spec.overrides[i]`` (:func:`protected_problems`), always, with or without verl
  installed, and are never composed;
- otherwise, where Hydra and verl's config files are importable (the dev venv, the trainer image, an
  operator image with the ``verl-config`` extra), the overrides are composed against the pinned verl
  config and verl's own start-up checks run on the result, in a child process that holds nothing of this
  one's (:mod:`flashrl_jobs.verl_child`). Where they are not, the report says so in a note and the
  launcher checks again before verl starts.

The command line and the operator differ in one input only: ``flashrl validate`` reads the model's
``config.json`` from the user's own files (a local path or the Hugging Face cache), for the checks that
depend on the model; the operator never opens what a spec names, so it leaves those to the launcher.
"""

from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass

from flashrl_api import FlashRLJob, Problem


@dataclass(frozen=True)
class ConfigReport:
    """What checking a job's verl configuration offline found."""

    problems: list[Problem]
    #: Said when the overrides could only be syntax-checked (no hydra or verl here).
    note: str | None = None
    #: verl checks that could not run here (the model-dependent ones without the model's files).
    skipped: tuple[str, ...] = ()


def budget_problems(job: FlashRLJob) -> list[Problem]:
    """The overrides beyond one job's check budget (size), at ``spec.overrides``: the one judgement
    ``flashrl validate`` and the operator both give, before anything (Hydra's parser included) reads
    an input beyond it."""
    from flashrl_jobs.override_rules import budget_problem

    too_big = budget_problem(job.spec.overrides)
    return [] if too_big is None else [Problem("spec.overrides", too_big)]


def protected_problems(job: FlashRLJob) -> list[Problem]:
    """Overrides beyond the size budget (:func:`budget_problems`, alone then), or that name code, reach
    the reserved environment or set a key other spec fields own (``trainer.nnodes`` ...), each at
    ``spec.overrides[i]``."""
    from flashrl_jobs.verl_args import protected_key_problems

    too_big = budget_problems(job)
    if too_big:
        return too_big
    return [Problem(f"spec.overrides[{i}]", msg) for i, msg in protected_key_problems(job.spec.overrides)]


def override_problems(
    job: FlashRLJob,
    *,
    start_up_checks: bool = True,
    read_model_files: bool = False,
    cancel: threading.Event | None = None,
) -> ConfigReport:
    """Problems with the job's verl configuration: the overrides, then verl's own start-up checks.

    ``start_up_checks=False`` composes the overrides only (for a spec whose own rules already failed:
    verl would repeat them). ``read_model_files`` lets verl's model-dependent checks read the model's
    ``config.json`` from this machine (the command line only). ``cancel`` set meanwhile stops the
    checks (``CheckCancelledError``).
    """
    too_big = budget_problems(job)
    if too_big:  # Nothing composed, here or in a child: the operator's verdict, as fast.
        return ConfigReport(too_big)
    protected = protected_problems(job)
    try:
        from flashrl_jobs.verl_config import VerlConfigUnavailableError, check_user_overrides

        # The sandboxed child starts a fresh interpreter; without Hydra here, it does not run there either.
        importlib.import_module("hydra")
    except ImportError as exc:
        return ConfigReport(
            protected, _syntax_only_note(exc.name or str(exc)) if job.spec.overrides else None
        )
    try:
        if protected or not start_up_checks:
            # Composition only (the protected overrides among the problems, never composed): one run
            # reports every bad override. An override that names code or reaches the reserved
            # environment keeps verl's start-up checks from running.
            return ConfigReport(check_user_overrides(job) if job.spec.overrides else protected)
        problems, skipped = checked_in_sandbox(job, read_model_files=read_model_files, cancel=cancel)
    except (VerlConfigUnavailableError, ImportError) as exc:
        return ConfigReport(protected, _syntax_only_note(str(exc)) if job.spec.overrides else None)
    return ConfigReport(problems, None, tuple(skipped))


def checked_in_sandbox(
    job: FlashRLJob, *, read_model_files: bool = False, cancel: threading.Event | None = None
) -> tuple[list[Problem], list[str]]:
    """verl's checks of the job in a child process that holds nothing of this one's
    (:mod:`flashrl_jobs.verl_child`). With ``read_model_files`` the model's ``config.json`` is read
    here, from the user's own files, and handed over. A child that gives no answer (or passes its time
    budget) is one problem at ``spec.overrides`` (``spec`` without overrides), in fixed words (nothing
    the child printed reaches a status or a terminal)."""
    from flashrl_jobs.verl_child import CheckCancelledError, VerlChildError, check_config_isolated

    model_config = None
    if read_model_files:
        from flashrl_api.staging import model_location
        from flashrl_jobs.verl_checks import cached_model_config_json, model_config_json

        model_config = model_config_json(model_location(job.spec)) or cached_model_config_json(
            job.spec.model.source
        )
    try:
        return check_config_isolated(job, model_config=model_config, cancel=cancel)
    except CheckCancelledError:
        raise
    except VerlChildError as exc:
        return [Problem("spec.overrides" if job.spec.overrides else "spec", str(exc))], []


def _syntax_only_note(why: str) -> str:
    return (
        f"note: spec.overrides were checked for syntax only, not composed against the verl config ({why}; "
        "install flashrl-k8s[verl-config] and verl to check them fully)"
    )
