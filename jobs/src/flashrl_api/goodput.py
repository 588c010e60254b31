"""Goodput: where every GPU-second of a FlashRLJob goes, by phase (pure arithmetic, stdlib only).

Two observers feed one ledger. The launcher, inside the attempt, splits the wall-clock from its own
start to its newest report (:class:`LauncherClock`): the GPU gate, verl's start-up, and each step by
verl's own ``timing_s/*`` metrics. The operator, outside, knows when the attempt's RayJob was created,
when the attempt ended and when its Ray cluster was gone; :func:`job_ledger` fills the time around the
launcher's window with the operator's phases and multiplies every phase by the attempt's GPU count.
The phases of one attempt telescope: ``pods_starting + launcher phases + lost_in_flight + teardown +
held_after_end`` is exactly ``release - start`` (``release``: its GPU worker pods gone), so every held
GPU-second lands in exactly one phase.

Why here and not in the operator: the launcher (``flashrl_jobs``) and the operator both import the
API package, never each other, and the phase vocabulary must be one list for the status, the
Prometheus label ``phase``, the dashboard and the report.

verl 0.9.1 keys (``trainer/ppo/v1/trainer_base.py`` ``fit`` and ``_step_once``, ``trainer_sync.py``
``on_step_end``): ``timing_s/step`` wraps ``gen``, ``reward``, ``old_log_prob``, ``ref``, ``values``,
``adv``, ``update_critic``, ``update_actor``, ``save_checkpoint`` and ``update_weights``;
``timing_s/testing`` (validation) follows the step, outside it. Dynamic sampling
(``trainer/ppo/v1/replay_buffer.py``) reports the prompt groups it generated and threw away:
``training/filter_groups/evicted_samples`` (every sample of the group scored the same) and
``training/filter_groups/discarded_surplus_samples`` (generated beyond the batch); the step keeps
``spec.training.promptBatchSize`` groups.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

from flashrl_api import times


class GoodputPhase(StrEnum):
    """Every phase a second of a job can be in; the value is the status's ``phase`` and the Prometheus
    label. The definitions (which timestamps, which verl keys) are in docs/observability.md."""

    #: Before GPUs are held (0 GPU-seconds; wall-clock only).
    STAGING = "staging"
    #: The attempt's RayJob exists but is suspended until Kueue admits it (0 GPU-seconds).
    QUEUED = "queued"
    #: Retry backoff: the failed attempt's cluster is gone, the next one not created (0 GPU-seconds).
    BACKOFF = "backoff"
    #: RayJob created → the launcher started (pods scheduled, images pulled, Ray up, job submitted).
    PODS_STARTING = "pods_starting"
    #: The launcher's wait until every GPU joined Ray.
    GPU_GATE = "gpu_gate"
    #: The launcher's start to verl's first step, minus the gate: config, model load, engines, resume.
    STARTUP = "startup"
    #: ``timing_s/gen`` of the groups the step kept.
    GENERATION = "generation"
    #: ``timing_s/gen`` × the share of prompt groups dynamic sampling generated and threw away.
    DISCARDED_GENERATION = "discarded_generation"
    #: ``timing_s/update_weights``: trainer → rollout weight sync (FP8 re-quantization included).
    WEIGHT_SYNC = "weight_sync"
    #: ``timing_s/old_log_prob`` + ``timing_s/ref`` + ``timing_s/values``.
    LOG_PROB = "log_prob"
    #: ``timing_s/update_actor`` + ``timing_s/update_critic`` + ``timing_s/adv``.
    ACTOR_UPDATE = "actor_update"
    #: ``timing_s/reward``.
    REWARD = "reward"
    #: ``timing_s/testing``: validation after a step.
    VALIDATION = "validation"
    #: ``timing_s/save_checkpoint``.
    CHECKPOINT = "checkpoint"
    #: The rest of ``timing_s/step``, and the launcher's time between steps (metrics, logging).
    STEP_OTHER = "step_other"
    #: A failed attempt's completed steps after its newest checkpoint (the next attempt redoes them).
    LOST_STEPS = "lost_steps"
    #: A failed attempt from the launcher's newest report to the failure (the step in flight).
    LOST_IN_FLIGHT = "lost_in_flight"
    #: The launcher's newest report → the attempt ended (the launcher exits, Ray ends the job).
    TEARDOWN = "teardown"
    #: The attempt's Ray job ended → its GPU worker pods are gone. KubeRay's deletion rules delete them
    #: at once, so this stays near zero; GPUs held by a finished run (a TTL, a stuck deletion) show here.
    HELD_AFTER_END = "held_after_end"


#: Phases that hold no GPU.
UNHELD: Final[frozenset[GoodputPhase]] = frozenset(
    {GoodputPhase.STAGING, GoodputPhase.QUEUED, GoodputPhase.BACKOFF}
)
#: Phases that trained the model: the steps that were kept, without checkpoint saves and discarded samples.
TRAINING: Final[frozenset[GoodputPhase]] = frozenset(
    {
        GoodputPhase.GENERATION,
        GoodputPhase.WEIGHT_SYNC,
        GoodputPhase.LOG_PROB,
        GoodputPhase.ACTOR_UPDATE,
        GoodputPhase.REWARD,
        GoodputPhase.STEP_OTHER,
    }
)
#: Phases the launcher observes (and exports); the operator exports the others (no double counting).
LAUNCHER_PHASES: Final[frozenset[GoodputPhase]] = frozenset(
    {
        GoodputPhase.GPU_GATE,
        GoodputPhase.STARTUP,
        GoodputPhase.DISCARDED_GENERATION,
        GoodputPhase.VALIDATION,
        GoodputPhase.CHECKPOINT,
        *TRAINING,
    }
)
#: Phases the operator observes and exports: the time around the launcher's window. ``lost_steps`` is
#: neither side's counter: it re-labels, in the status, seconds the launcher counted as step phases.
OPERATOR_PHASES: Final[tuple[GoodputPhase, ...]] = (
    GoodputPhase.PODS_STARTING,
    GoodputPhase.LOST_IN_FLIGHT,
    GoodputPhase.TEARDOWN,
    GoodputPhase.HELD_AFTER_END,
)
#: Phases moved, for a failed attempt, into :data:`GoodputPhase.LOST_STEPS` (pro rata of its steps).
STEP_PHASES: Final[frozenset[GoodputPhase]] = frozenset(
    {*TRAINING, GoodputPhase.DISCARDED_GENERATION, GoodputPhase.VALIDATION, GoodputPhase.CHECKPOINT}
)

#: verl 0.9.1 ``timing_s/*`` keys inside ``timing_s/step`` → phase.
IN_STEP_KEYS: Final[Mapping[str, GoodputPhase]] = {
    "timing_s/gen": GoodputPhase.GENERATION,
    "timing_s/update_weights": GoodputPhase.WEIGHT_SYNC,
    "timing_s/old_log_prob": GoodputPhase.LOG_PROB,
    "timing_s/ref": GoodputPhase.LOG_PROB,
    "timing_s/values": GoodputPhase.LOG_PROB,
    "timing_s/adv": GoodputPhase.ACTOR_UPDATE,
    "timing_s/update_critic": GoodputPhase.ACTOR_UPDATE,
    "timing_s/update_actor": GoodputPhase.ACTOR_UPDATE,
    "timing_s/reward": GoodputPhase.REWARD,
    "timing_s/save_checkpoint": GoodputPhase.CHECKPOINT,
}
STEP_KEY: Final = "timing_s/step"
TESTING_KEY: Final = "timing_s/testing"
#: Prompt groups dynamic sampling generated and did not use (``replay_buffer.py``).
DISCARDED_GROUP_KEYS: Final = (
    "training/filter_groups/evicted_samples",
    "training/filter_groups/discarded_surplus_samples",
)
#: Longest ``byPhase`` list: one entry per phase.
MAX_PHASES: Final = len(GoodputPhase)
_ORDER: Final = {p: i for i, p in enumerate(GoodputPhase)}
_NAMES: Final = frozenset(p.value for p in GoodputPhase)


@dataclass
class LauncherClock:
    """The launcher's split of its own wall-clock (Unix seconds in, seconds per phase out).

    Fed timestamps, never reads a clock: ``launched`` (the launcher started), :meth:`gate` (the GPU
    gate's start and end), :meth:`step` (a step's record and when it was seen). :meth:`phases` splits
    ``[launched, as_of]`` with nothing left over.
    """

    launched: float
    kept_groups: int = 0
    seconds: dict[GoodputPhase, float] = field(default_factory=dict)
    #: End of the time already split (the launcher's start, the gate's end, the newest step).
    boundary: float = 0.0
    steps: int = 0

    def __post_init__(self) -> None:
        self.boundary = self.launched

    def _add(self, phase: GoodputPhase, seconds: float) -> None:
        if seconds > 0:
            self.seconds[phase] = self.seconds.get(phase, 0.0) + seconds

    def gate(self, start: float, end: float) -> None:
        """The GPU gate ran from ``start`` to ``end``; before it (config composition) is start-up."""
        start = max(self.boundary, start)
        end = max(start, end)
        self._add(GoodputPhase.STARTUP, start - self.boundary)
        self._add(GoodputPhase.GPU_GATE, end - start)
        self.boundary = end

    def step(self, values: Mapping[str, float], seen: float) -> None:
        """A completed step's metrics, seen at ``seen``: split ``[boundary, seen]``.

        The step and its validation end at ``seen``; what lies before them is start-up (first step)
        or the launcher's time between steps. When verl's timings exceed the time since the last
        boundary (a record read late, clocks apart), they are scaled down to fit.
        """
        window = max(0.0, seen - self.boundary)
        step = max(0.0, values.get(STEP_KEY, 0.0))
        testing = max(0.0, values.get(TESTING_KEY, 0.0))
        scale = min(1.0, window / (step + testing)) if step + testing > 0 else 1.0
        step, testing = step * scale, testing * scale
        parts: dict[GoodputPhase, float] = {}
        for key, phase in IN_STEP_KEYS.items():
            if (value := values.get(key)) is not None and value > 0:
                parts[phase] = parts.get(phase, 0.0) + value * scale
        inside = sum(parts.values())
        if step <= 0:  # no timing_s/step (an older verl): the parts are the step, within the window
            step = min(inside, max(0.0, window - testing))
        if inside > step:
            parts = {p: v * step / inside for p, v in parts.items()}
        gen = parts.pop(GoodputPhase.GENERATION, 0.0)
        discarded = sum(max(0.0, values.get(k, 0.0)) for k in DISCARDED_GROUP_KEYS)
        share = discarded / (discarded + self.kept_groups) if discarded > 0 and self.kept_groups > 0 else 0.0
        self._add(GoodputPhase.GENERATION, gen * (1.0 - share))
        self._add(GoodputPhase.DISCARDED_GENERATION, gen * share)
        for phase, value in parts.items():
            self._add(phase, value)
        self._add(GoodputPhase.STEP_OTHER, step - min(step, sum(parts.values()) + gen))
        self._add(GoodputPhase.VALIDATION, testing)
        self._add(
            GoodputPhase.STARTUP if self.steps == 0 else GoodputPhase.STEP_OTHER, window - step - testing
        )
        self.boundary = max(self.boundary, seen)
        self.steps += 1

    def phases(self, as_of: float) -> dict[GoodputPhase, float]:
        """Seconds per phase over ``[launched, as_of]``; the time since the boundary is start-up (before
        the first step) or step_other (a step under way)."""
        out = dict(self.seconds)
        tail = max(0.0, as_of - self.boundary)
        if tail > 0:
            phase = GoodputPhase.STARTUP if self.steps == 0 else GoodputPhase.STEP_OTHER
            out[phase] = out.get(phase, 0.0) + tail
        return out


def parse_rfc3339(value: object) -> float | None:
    """Unix seconds of an RFC 3339 timestamp (with or without fractions), or ``None``."""
    moment = times.parse_rfc3339(value)
    return moment.timestamp() if moment is not None else None


def launcher_phases(clock: LauncherClock, as_of: float, attempt: int | None, gpus: int) -> dict[str, object]:
    """``status.launcherPhases``: the launcher's split up to ``as_of``, as the operator reads it."""
    wire: dict[str, object] = {
        "launchTime": times.rfc3339_millis(clock.launched),
        "reportTime": times.rfc3339_millis(max(as_of, clock.launched)),
        "steps": clock.steps,
        "phases": [
            {"phase": str(p), "seconds": round(s, 3), "gpuSeconds": round(s * gpus, 3)}
            for p, s in sorted(clock.phases(as_of).items(), key=lambda item: _ORDER[item[0]])
        ],
    }
    if attempt is not None:
        wire["attempt"] = attempt
    return wire


@dataclass(frozen=True)
class AttemptSpan:
    """What is known of one attempt, as Unix seconds; ``None`` where it has not happened (yet)."""

    attempt: int
    gpus: int
    #: The attempt's RayJob was created, or admitted by Kueue (GPUs requested; held from here on).
    start: float
    #: The launcher's window: its start, its newest report, and its split of that window.
    launched: float | None = None
    reported: float | None = None
    launcher: Mapping[str, float] = field(default_factory=dict)
    #: Steps the launcher saw complete in this attempt.
    steps: int = 0
    #: The attempt ended (the operator saw its RayJob finish or fail).
    end: float | None = None
    #: Its GPU worker pods were gone (GPUs released; the CPU head may stay for its TTL).
    release: float | None = None
    failed: bool = False
    #: Completed steps after the attempt's newest checkpoint (lost when it failed).
    lost_steps: int = 0


@dataclass(frozen=True)
class Ledger:
    """Seconds and GPU-seconds per phase (every phase present, in :class:`GoodputPhase` order)."""

    seconds: Mapping[GoodputPhase, float]
    gpu_seconds: Mapping[GoodputPhase, float]

    @property
    def held_gpu_seconds(self) -> float:
        """GPU-seconds the job held: every phase but the unheld ones."""
        return sum(v for p, v in self.gpu_seconds.items() if p not in UNHELD)

    @property
    def training_gpu_seconds(self) -> float:
        """GPU-seconds that trained the model (:data:`TRAINING`)."""
        return sum(v for p, v in self.gpu_seconds.items() if p in TRAINING)

    @property
    def productive_fraction(self) -> float | None:
        """Training over held, or ``None`` before any GPU was held."""
        held = self.held_gpu_seconds
        return self.training_gpu_seconds / held if held > 0 else None

    def to_wire(self) -> dict[str, object]:
        """``status.goodput`` (camelCase; phases with no time left out)."""
        fraction = self.productive_fraction
        wire: dict[str, object] = {
            "heldGPUSeconds": round(self.held_gpu_seconds, 1),
            "trainingGPUSeconds": round(self.training_gpu_seconds, 1),
            "byPhase": [
                {"phase": str(p), "seconds": round(self.seconds[p], 1), "gpuSeconds": round(g, 1)}
                for p, g in self.gpu_seconds.items()
                if self.seconds[p] > 0
            ],
        }
        if fraction is not None:
            wire["productiveFraction"] = round(fraction, 4)
        return wire


def attempt_seconds(span: AttemptSpan, as_of: float) -> dict[GoodputPhase, float]:
    """Wall seconds per phase of one attempt, from its start to its release (or ``as_of``)."""
    out: dict[GoodputPhase, float] = {}

    def add(phase: GoodputPhase, seconds: float) -> None:
        if seconds > 0:
            out[phase] = out.get(phase, 0.0) + seconds

    until = span.release if span.release is not None else max(as_of, span.start)
    end = span.end if span.end is not None else until
    end = min(end, until)
    if span.launched is None:
        add(GoodputPhase.PODS_STARTING, end - span.start)
    else:
        launched = min(max(span.launched, span.start), end)
        add(GoodputPhase.PODS_STARTING, launched - span.start)
        reported = min(max(span.reported or launched, launched), end)
        window = reported - launched
        known = {GoodputPhase(p): max(0.0, s) for p, s in span.launcher.items() if p in _NAMES}
        total = sum(known.values())
        if total > 0:
            for phase, seconds in known.items():
                add(phase, seconds * window / total)  # the launcher's split, fitted to its window
        else:
            add(GoodputPhase.STARTUP, window)
        after = end - reported
        if span.failed:
            add(GoodputPhase.LOST_IN_FLIGHT, after)
        else:
            add(GoodputPhase.TEARDOWN, after)
        if span.failed and span.lost_steps > 0 and span.steps > 0:
            share = min(1.0, span.lost_steps / span.steps)
            for phase in STEP_PHASES:
                if phase in out:
                    moved = out[phase] * share
                    out[phase] -= moved
                    add(GoodputPhase.LOST_STEPS, moved)
    add(GoodputPhase.HELD_AFTER_END, until - end)
    return out


def job_ledger(
    spans: Iterable[AttemptSpan],
    as_of: float,
    staging: float = 0.0,
    backoff: float = 0.0,
    queued: float = 0.0,
) -> Ledger:
    """The job's ledger: each attempt's phases × its GPUs, plus the wall-clock of staging, queueing and
    backoff (no GPU held)."""
    seconds = dict.fromkeys(GoodputPhase, 0.0)
    gpu_seconds = dict.fromkeys(GoodputPhase, 0.0)
    seconds[GoodputPhase.STAGING] = max(0.0, staging)
    seconds[GoodputPhase.QUEUED] = max(0.0, queued)
    seconds[GoodputPhase.BACKOFF] = max(0.0, backoff)
    for span in spans:
        for phase, value in attempt_seconds(span, as_of).items():
            seconds[phase] += value
            gpu_seconds[phase] += value * span.gpus
    return Ledger(seconds, gpu_seconds)


def ledger_of(by_phase: Iterable[Mapping[str, object]]) -> Ledger:
    """A ledger read back from ``status.goodput.byPhase`` (unknown phases are ignored)."""
    seconds = dict.fromkeys(GoodputPhase, 0.0)
    gpu_seconds = dict.fromkeys(GoodputPhase, 0.0)
    for entry in by_phase:
        name = entry.get("phase")
        if name not in _NAMES:
            continue
        phase = GoodputPhase(str(name))
        for target, key in ((seconds, "seconds"), (gpu_seconds, "gpuSeconds")):
            value = entry.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                target[phase] += float(value)
    return Ledger(seconds, gpu_seconds)


def step_ledger(records: Iterable[Mapping[str, float]], gpus: int = 1, kept_groups: int = 0) -> Ledger:
    """A ledger of verl's steps alone (no pods, start-up or restarts): each record's ``timing_s/*``
    split as the launcher would, the step and its validation back to back. For metrics files read
    without the job's status."""
    clock = LauncherClock(launched=0.0, kept_groups=kept_groups)
    for values in records:
        seen = clock.boundary + max(0.0, values.get(STEP_KEY, 0.0)) + max(0.0, values.get(TESTING_KEY, 0.0))
        if seen <= clock.boundary:
            seen = clock.boundary + sum(max(0.0, values.get(k, 0.0)) for k in IN_STEP_KEYS)
        clock.step(values, seen)
    seconds = dict.fromkeys(GoodputPhase, 0.0)
    for phase, value in clock.phases(clock.boundary).items():
        seconds[phase] = value
    return Ledger(seconds, {p: s * gpus for p, s in seconds.items()})


#: The phases that are generation, kept or discarded: the "generation-only" speed-up compares these.
GENERATION: Final[frozenset[GoodputPhase]] = frozenset(
    {GoodputPhase.GENERATION, GoodputPhase.DISCARDED_GENERATION}
)


@dataclass(frozen=True)
class Comparison:
    """A variant against the baseline, per training step: end to end and generation only."""

    #: Baseline held GPU-seconds per step / the variant's (> 1: the variant is faster).
    end_to_end: float
    #: The same ratio over generation alone.
    generation: float
    #: The phase (other than generation) whose GPU-seconds per step differ most in the direction that
    #: separates the end-to-end speed-up from the generation-only one, and that difference (variant minus
    #: baseline, GPU-seconds per step).
    decisive: GoodputPhase | None
    decisive_delta: float

    def sentence(self, variant: str, baseline: str) -> str:
        """One line for the report: both speed-ups and the phase that makes the difference."""
        text = (
            f"{variant} over {baseline}: {self.end_to_end:.2f}x end to end (per training step, every held "
            f"GPU-second counted), {self.generation:.2f}x in generation alone"
        )
        if self.decisive is None:
            if abs(self.end_to_end - self.generation) < 0.005:
                return text
            return f"{text}; the other phases take as long as in {baseline} and dilute the difference"
        more = "more" if self.decisive_delta > 0 else "less"
        return (
            f"{text}; {self.decisive} makes the difference ({abs(self.decisive_delta):.1f} GPU-s per step "
            f"{more} than {baseline})"
        )


def per_step(ledger: Ledger, steps: int) -> dict[GoodputPhase, float]:
    """Held GPU-seconds per training step, by phase."""
    if steps <= 0:
        return {}
    return {p: v / steps for p, v in ledger.gpu_seconds.items() if p not in UNHELD}


def compare(variant: Ledger, variant_steps: int, baseline: Ledger, baseline_steps: int) -> Comparison | None:
    """The variant's speed-ups over the baseline, or ``None`` when either has no step or no generation."""
    mine, theirs = per_step(variant, variant_steps), per_step(baseline, baseline_steps)
    if not mine or not theirs:
        return None
    held_mine, held_theirs = sum(mine.values()), sum(theirs.values())
    gen_mine = sum(mine.get(p, 0.0) for p in GENERATION)
    gen_theirs = sum(theirs.get(p, 0.0) for p in GENERATION)
    if held_mine <= 0 or gen_mine <= 0:
        return None
    end_to_end, generation = held_theirs / held_mine, gen_theirs / gen_mine
    deltas = {
        p: mine.get(p, 0.0) - theirs.get(p, 0.0) for p in mine.keys() | theirs.keys() if p not in GENERATION
    }
    # End to end below generation alone: the phase the variant spends most extra on; above: least.
    sign = 1.0 if end_to_end < generation else -1.0
    decisive = max(deltas, key=lambda p: sign * deltas[p], default=None)
    if decisive is None or sign * deltas[decisive] <= 0:
        return Comparison(end_to_end, generation, None, 0.0)
    return Comparison(end_to_end, generation, decisive, deltas[decisive])
