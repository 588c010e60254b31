"""The verl metrics the comparison report reads, one row each: a new report metric is one row here.

Each row says, for one verl name (or a family of names, a prefix ending in ``/``), whether the job's
per-step history keeps it (``flashrl_api.history.KEPT_NAMES`` and ``KEPT_PREFIXES`` are read off the
rows, and the launcher reports what the history keeps: ``exported_metrics.status_metric_names``), the
line plot the report draws of it, and the synthetic curve the demo, the tests and the docs' screenshot
draw it from (``flashrl_report.synthetic``). The report's figures follow the rows' order: a row's line
plot, then the figures of their own it names (drawn from more than one metric by their own function in
``flashrl_report``). ``tests/unit/report/test_report_rows.py`` fails when a plotted metric is not
kept, a figure is named twice or never drawn, or a synthetic run lacks a row's metric.

The rows live beside the API models, not in the report, because the history (operator and launcher
alike) reads which names are kept, and the report is not installed in their images.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol

from flashrl_api import verl_metrics as vm


class SyntheticStep(Protocol):
    """What a synthetic step (``flashrl_report.synthetic.records``) offers a row's curve. Its random
    draws are taken in row order, so a curve that draws noise must keep its place among the rows."""

    #: Fraction of the run done, 0..1.
    progress: float
    #: Mean response length (tokens).
    length: float
    #: Seconds of generation, of the whole step, GPUs of the run.
    gen: float
    step_time: float
    gpus: int
    #: Tokens generated and read in the step.
    response_tokens: float
    prompt_tokens: float

    @property
    def kl(self) -> float | None:
        """The step's rollout/trainer mismatch KL (None: the run logs no mismatch)."""

    def noise(self, sd: float) -> float:
        """A normal draw of standard deviation ``sd`` from the run's own noise."""


Curve = Callable[[SyntheticStep], float | None]


@dataclass(frozen=True)
class LinePlot:
    """The report's line plot of a metric against training step (and wall time)."""

    id: str
    title: str
    ylabel: str
    #: Also drawn against hours of training (a second panel).
    wall_time: bool = False
    #: A rolling mean over the steps when there are more than its window.
    smooth: bool = True
    #: Points marked (sparse metrics, such as validations).
    markers: bool = False
    #: A dashed reference line: its value and legend.
    hline: tuple[float, str] | None = None
    #: Names tried after the row's own, per run, when it did not log it (the first found is drawn).
    fallbacks: tuple[str, ...] = ()
    #: What the caption calls the metric when it may be another name (with fallbacks).
    what: str = ""


@dataclass(frozen=True)
class ReportMetric:
    """One verl metric (or family of them, a prefix ending in ``/``) the report reads."""

    name: str
    #: Whether the job's history keeps it (what a report of a cluster job can draw).
    kept: bool = True
    plot: LinePlot | None = None
    #: Figures of their own that follow this row on the page (ids; drawn by ``flashrl_report``).
    figures: tuple[str, ...] = ()
    #: Its value in a synthetic step (None: not logged at that step); None for a family, whose names
    #: the synthetic step model writes itself (the score, the phase timers).
    synthetic: Curve | None = None

    @property
    def family(self) -> bool:
        """Whether the row stands for every name under a prefix."""
        return self.name.endswith("/")


def _with_kl(curve: Callable[[SyntheticStep, float], float]) -> Curve:
    """A mismatch curve: logged only by runs with rollout log-probs."""

    def value(step: SyntheticStep) -> float | None:
        kl = step.kl
        return None if kl is None else curve(step, kl)

    return value


#: In page order of their plots (and, among the synthetic curves, in the order they draw noise).
ROWS: Final[tuple[ReportMetric, ...]] = (
    ReportMetric(
        vm.VAL_CORE_PREFIX,
        plot=LinePlot(
            "validation-score", "Validation score", "score", wall_time=True, smooth=False, markers=True
        ),
        figures=("paired-difference", "per-problem"),
    ),
    ReportMetric(
        vm.CRITIC_SCORE_MEAN,
        plot=LinePlot("training-score", "Training score (reward)", "mean score"),
        synthetic=lambda s: -0.6 + 0.5 * s.progress + s.noise(0.05),
    ),
    ReportMetric(
        vm.ENTROPY,
        plot=LinePlot("entropy", "Policy entropy", "entropy (nats / token)"),
        synthetic=lambda s: 0.55 - 0.2 * s.progress + s.noise(0.02),
    ),
    ReportMetric(
        vm.RESPONSE_LENGTH_MEAN,
        plot=LinePlot("response-length", "Mean response length", "tokens"),
        synthetic=lambda s: s.length,
    ),
    ReportMetric(
        vm.RESPONSE_LENGTH_CLIP_RATIO,
        plot=LinePlot("response-clip-ratio", "Responses cut at the maximum length", "fraction of responses"),
        synthetic=lambda s: max(0.0, 0.01 + 0.03 * s.progress + s.noise(0.005)),
    ),
    ReportMetric(
        vm.THROUGHPUT,
        plot=LinePlot("throughput", "Throughput", "tokens / s / GPU", wall_time=True),
        synthetic=lambda s: (s.prompt_tokens + s.response_tokens) / (s.step_time * s.gpus),
    ),
    ReportMetric(
        vm.GEN_MS_PER_TOKEN,
        figures=("generation-speedup",),
        synthetic=lambda s: s.gen * 1000 / s.response_tokens,
    ),
    ReportMetric(vm.TIMING_PREFIX, figures=("time-breakdown", "goodput-phases")),
    ReportMetric(vm.TOTAL_TOKENS, synthetic=lambda s: s.prompt_tokens + s.response_tokens),
    ReportMetric(
        vm.MISMATCH_KL,
        plot=LinePlot(
            "mismatch-kl",
            "Rollout/trainer mismatch KL",
            "KL(rollout ‖ trainer)",
            fallbacks=(vm.MISMATCH_K3_KL,),
            what="rollout_corr/kl (or rollout_corr/k3_kl)",
        ),
        synthetic=_with_kl(lambda s, kl: kl),
    ),
    ReportMetric(vm.MISMATCH_K3_KL, synthetic=_with_kl(lambda s, kl: kl * 0.98)),
    ReportMetric(vm.LOG_PPL_ABS_DIFF, synthetic=_with_kl(lambda s, kl: kl * 1.7)),
    ReportMetric(vm.IS_MEAN, synthetic=_with_kl(lambda s, kl: 1.0 + s.noise(0.002))),
    ReportMetric(
        vm.IS_ESS,
        plot=LinePlot(
            "is-ess",
            "Importance-sampling effective sample size",
            "ESS fraction",
            hline=(0.3, "verl's health threshold 0.3"),
        ),
        synthetic=_with_kl(lambda s, kl: max(0.0, min(1.0, 1 - 9 * kl + s.noise(0.002)))),
    ),
    ReportMetric(
        vm.IS_CLIP_FRACTION,
        plot=LinePlot("tis-clip-fraction", "TIS clipped fraction", "fraction of tokens at the cap"),
        synthetic=_with_kl(lambda s, kl: kl * 0.8),
    ),
    ReportMetric(
        vm.PROBS_DIFF_MEAN,
        plot=LinePlot(
            "probs-diff", "Rollout vs trainer token-probability difference", "mean |p_rollout − p_train|"
        ),
        synthetic=_with_kl(lambda s, kl: 2.4 * math.sqrt(kl) * 0.1 * (1 + s.noise(0.05))),
    ),
    ReportMetric(vm.PROBS_DIFF_MAX, synthetic=_with_kl(lambda s, kl: min(1.0, 0.6 + 40 * kl))),
)


def kept_names() -> frozenset[str]:
    """The single names the history keeps."""
    return frozenset(r.name for r in ROWS if r.kept and not r.family)


def kept_prefixes() -> tuple[str, ...]:
    """The families the history keeps (prefixes ending in ``/``)."""
    return tuple(r.name for r in ROWS if r.kept and r.family)


def figure_ids() -> tuple[str, ...]:
    """Every figure of the report, in page order."""
    return tuple(figure for row in ROWS for figure in ((row.plot.id,) if row.plot else ()) + row.figures)


__all__ = [
    "ROWS",
    "Curve",
    "LinePlot",
    "ReportMetric",
    "SyntheticStep",
    "figure_ids",
    "kept_names",
    "kept_prefixes",
]
