"""The accuracy verdict: each variant against the baseline, problem by problem, from every validation sample.

Every variant of an experiment answers the same validation problems, so the comparison is paired:
per problem, the variant's accuracy minus the baseline's, averaged over the problems, with a
bootstrap interval over problems and samples (:func:`flashrl_report.intervals.paired_difference`).
It is made at each validation step both runs logged, and over the late stretch (the last quarter of
those steps, samples pooled per problem), which carries the verdict: "higher than <baseline>" or
"lower than <baseline>" only when its interval excludes 0, else "no clear difference".

Replicas (runs labelled ``<variant>#<k>``, replica k of every variant sharing seed k) are pooled:
their samples of a problem are more samples of it, paired replica by replica (only steps every pair
logged count). Each pair's own late estimate is kept too: their spread is the seed-to-seed noise the
precision effect is judged beside.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from html import escape
from typing import Final

from matplotlib.figure import Figure

from flashrl_report.intervals import LEVEL, RESAMPLES, SEED, Interval, paired_difference
from flashrl_report.plots import Plot, _figure, png_bytes
from flashrl_report.validation import Problems, ValidationSamples

#: ``<variant>#<k>``: replica k of a variant (the cluster path labels replicas so; files may too).
REPLICA_LABEL: Final = re.compile(r"^(?P<variant>.+)#(?P<k>\d+)$")
SECTION_ID: Final = "paired"


def split_label(label: str) -> tuple[str, int]:
    """``("bf16", 2)`` for ``bf16#2``; ``(label, 0)`` for a label without a replica."""
    match = REPLICA_LABEL.match(label)
    return (match["variant"], int(match["k"])) if match else (label, 0)


@dataclass(frozen=True)
class ProblemRow:
    """One problem over the late stretch: each run's share of correct samples."""

    problem: str
    baseline: float
    variant: float
    baseline_samples: int
    variant_samples: int

    @property
    def difference(self) -> float:
        """Variant minus baseline."""
        return self.variant - self.baseline


@dataclass
class PairedComparison:
    """One variant against the baseline."""

    variant: str
    baseline: str
    #: Replica indices paired (the same seed on both sides).
    replicas: list[int]
    #: ``(step, interval)`` at every validation step every pair logged.
    per_step: list[tuple[int, Interval]] = field(default_factory=list)
    late_steps: list[int] = field(default_factory=list)
    late: Interval | None = None
    #: ``(replica, late estimate)`` per seed, when there are several.
    per_seed: list[tuple[int, float]] = field(default_factory=list)
    per_problem: list[ProblemRow] = field(default_factory=list)
    #: Samples per problem on each side, in words.
    samples: str = ""

    @property
    def verdict(self) -> str:
        """ "higher than <baseline>", "lower than <baseline>" or "no clear difference" (late stretch)."""
        if self.late is None:
            return "no clear difference"
        return self.late.verdict(f"higher than {self.baseline}", f"lower than {self.baseline}")

    def seed_spread(self) -> float | None:
        """Standard deviation of the per-seed late estimates (None with fewer than two seeds)."""
        if len(self.per_seed) < 2:
            return None
        values = [v for _, v in self.per_seed]
        mean = sum(values) / len(values)
        return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))

    def gains_losses(self) -> tuple[int, int, int]:
        """Problems the variant solves more often, less often, and as often as the baseline (late)."""
        gains = sum(1 for r in self.per_problem if r.difference > 0)
        losses = sum(1 for r in self.per_problem if r.difference < 0)
        return gains, losses, len(self.per_problem) - gains - losses


def _pool(replicas: Mapping[int, ValidationSamples], pairs: Sequence[int], steps: Sequence[int]) -> Problems:
    out: Problems = {}
    for k in pairs:
        for problem, values in replicas[k].pooled(steps).items():
            out.setdefault(problem, []).extend(values)
    return out


def _late(steps: Sequence[int]) -> list[int]:
    trained = [s for s in steps if s > 0] or list(steps)
    q = max(1, math.ceil(len(trained) / 4))
    return list(trained[-q:])


def compare(
    variant: Mapping[int, ValidationSamples], baseline: Mapping[int, ValidationSamples]
) -> PairedComparison | None:
    """The paired comparison of one variant's replicas with the baseline's (None: nothing in common)."""
    pairs = sorted(set(variant) & set(baseline))
    if not pairs:
        return None
    v_label = split_label(variant[pairs[0]].label)[0]
    b_label = split_label(baseline[pairs[0]].label)[0]
    out = PairedComparison(v_label, b_label, pairs)
    common: set[int] | None = None
    for k in pairs:
        shared = set(variant[k].steps) & set(baseline[k].steps)
        common = shared if common is None else common & shared
    for step in sorted(common or ()):
        interval = paired_difference(_pool(variant, pairs, [step]), _pool(baseline, pairs, [step]))
        if interval is not None:
            out.per_step.append((step, interval))
    if not out.per_step:
        return out
    out.late_steps = _late([s for s, _ in out.per_step])
    v_late, b_late = _pool(variant, pairs, out.late_steps), _pool(baseline, pairs, out.late_steps)
    out.late = paired_difference(v_late, b_late)
    if len(pairs) > 1:
        for k in pairs:
            one = paired_difference(
                variant[k].pooled(out.late_steps), baseline[k].pooled(out.late_steps), resamples=1
            )
            if one is not None:
                out.per_seed.append((k, one.estimate))
    out.per_problem = [
        ProblemRow(
            p,
            sum(b_late[p]) / len(b_late[p]),
            sum(v_late[p]) / len(v_late[p]),
            len(b_late[p]),
            len(v_late[p]),
        )
        for p in sorted(b_late, key=lambda p: (sum(b_late[p]) / len(b_late[p]), p))
        if v_late.get(p)
    ]
    v_counts = [len(v) for v in v_late.values()]
    b_counts = [len(v) for v in b_late.values()]
    out.samples = (
        f"{len(out.per_problem)} problems; per problem over the late stretch: {_range(v_counts)} samples "
        f"({v_label}), {_range(b_counts)} ({b_label})"
    )
    return out


def _range(counts: Sequence[int]) -> str:
    if not counts:
        return "0"
    return str(counts[0]) if min(counts) == max(counts) else f"{min(counts)}–{max(counts)}"


def by_variant(samples: Sequence[ValidationSamples]) -> dict[str, dict[int, ValidationSamples]]:
    """Samples grouped by variant, then replica."""
    out: dict[str, dict[int, ValidationSamples]] = {}
    for s in samples:
        variant, k = split_label(s.label)
        out.setdefault(variant, {})[k] = s
    return out


def compare_all(samples: Sequence[ValidationSamples], baseline: str | None) -> list[PairedComparison]:
    """Every variant against the baseline (its variant name, replicas pooled), in the runs' order."""
    if baseline is None:
        return []
    groups = by_variant(samples)
    base = groups.get(split_label(baseline)[0])
    if base is None:
        return []
    out = []
    for replicas in groups.values():
        if replicas is base:
            continue
        found = compare(replicas, base)
        if found is not None:
            out.append(found)
    return out


#: Fewer samples per problem than this and a problem's accuracy is a coin flip or two: the page says so.
FEW_SAMPLES: Final = 4


def _few(samples: ValidationSamples) -> str:
    spp = samples.samples_per_problem()
    if spp is None or spp[0] >= FEW_SAMPLES:
        return ""
    return escape(
        f" — only {spp[0]} sample(s) for some problems in a validation: too few to tell problems apart; "
        "set spec.validation.samplesPerProblem (verl's val_kwargs.n), e.g. 32"
    )


def _interval_cell(interval: Interval | None, verdict: str) -> str:
    if interval is None:
        return "<td>–</td><td>–</td>"
    return (
        f'<td class="interval">{escape(interval.text(signed=True))}'
        f'<span class="sub">n={interval.n} problems</span></td>'
        f'<td class="verdict">{escape(verdict)}</td>'
    )


def paired_section(
    comparisons: Sequence[PairedComparison],
    samples: Sequence[ValidationSamples],
    baseline: str | None,
    missing: Sequence[str],
) -> str:
    """The page's section "Accuracy, problem by problem"."""
    parts = [f'<section id="{SECTION_ID}"><h2>Accuracy, problem by problem (paired)</h2>']
    if samples:
        parts.append(
            '<ul class="samples">'
            + "".join(
                f"<li>{escape(s.label)}: {escape(s.describe())}{_few(s)}"
                f" (from {escape(', '.join(s.sources))})</li>"
                for s in samples
            )
            + "</ul>"
        )
    if not comparisons:
        why = (
            "no run has validation samples (the per-problem summaries in a job's <job>-metrics ConfigMap, "
            "read by --experiment/--job, or verl's validation dumps: --validation LABEL=DIR)"
            if not samples
            else "no baseline with validation samples to compare with"
            if baseline is None
            or not any(split_label(s.label)[0] == split_label(baseline)[0] for s in samples)
            else "the variants and the baseline share no validation step and problem"
        )
        parts.append(f"<p>No paired comparison: {escape(why)}.</p>")
    else:
        parts.append(
            "<table><thead><tr><th>variant</th><th>late stretch: accuracy − "
            f"{escape(comparisons[0].baseline)}</th><th>verdict</th><th>seed to seed</th>"
            "<th>validations with a clear difference</th><th>problems gained / lost / even (late)</th>"
            "</tr></thead><tbody>"
        )
        for c in comparisons:
            spread = c.seed_spread()
            seeds = (
                "one seed per variant: no seed-to-seed spread (spec.replicas gives more)"
                if spread is None
                else ", ".join(f"seed {k}: {v:+.3f}" for k, v in c.per_seed) + f"; sd {spread:.3f}"
            )
            higher = sum(1 for _, i in c.per_step if i.low > 0)
            lower = sum(1 for _, i in c.per_step if i.high < 0)
            gains, losses, even = c.gains_losses()
            late = (
                f"steps {c.late_steps[0]}–{c.late_steps[-1]} ({len(c.late_steps)} validations); {c.samples}"
                if c.late_steps
                else ""
            )
            parts.append(
                f'<tr data-variant="{escape(c.variant)}"><td>{escape(c.variant)}'
                f'<span class="sub">{len(c.replicas)} replica(s)</span></td>'
                + _interval_cell(c.late, c.verdict).replace(
                    "</td><td", f'<span class="sub">{escape(late)}</span></td><td', 1
                )
                + f"<td>{escape(seeds)}</td>"
                f"<td>{higher} higher, {lower} lower, of {len(c.per_step)} shared validations</td>"
                f'<td class="gains">{gains} / {losses} / {even}</td></tr>'
            )
        parts.append("</tbody></table>")
        prompts = {pid: text for s in samples for pid, text in s.prompts.items()}
        parts.append(_problem_table(comparisons, prompts))
    parts.extend(f'<p class="stats">{escape(m)}</p>' for m in missing)
    parts.append(
        '<p class="stats">Each validation sample is scored by the reward function (its <code>acc</code> '
        "when it reports one, as verl's val-core metric does; else its <code>score</code>); identical "
        "prompts are one problem, whether the file repeats them or verl sampled them several times. A "
        "variant's accuracy difference is the mean over the shared problems of (its share of correct "
        "samples − the baseline's), "
        f"with a {100 * LEVEL:.0f} % paired bootstrap interval ({RESAMPLES} resamples of the problems, and "
        "of each "
        f"problem's samples, numpy seed {SEED}). The verdict is read from the late stretch (the last quarter "
        "of the validations both ran after step 0, samples pooled per problem, replicas pooled seed by "
        "seed): higher or lower only when the interval excludes 0, else no clear difference.</p></section>"
    )
    return "\n".join(parts)


def problem_order(comparisons: Sequence[PairedComparison]) -> tuple[list[str], dict[str, float]]:
    """The problems in the order the figure and the table number them (P1 = the one the baseline
    solves least often in the first comparison's late stretch), and the baseline's accuracy on each."""
    base_acc: dict[str, float] = {}
    for c in reversed(comparisons):
        base_acc.update({r.problem: r.baseline for r in c.per_problem})
    return sorted(base_acc, key=lambda p: (base_acc[p], p)), base_acc


def _problem_table(comparisons: Sequence[PairedComparison], prompts: Mapping[str, str]) -> str:
    """Per problem, the baseline's and each variant's late accuracy (a collapsed table); a problem is
    shown by its prompt when a run's dumps gave it, else by its id (the ConfigMap's summaries)."""
    base = comparisons[0].baseline
    rows: dict[str, dict[str, float]] = {}
    for c in comparisons:
        for r in c.per_problem:
            rows.setdefault(r.problem, {})[c.variant] = r.variant - r.baseline
    order, base_acc = problem_order(comparisons)
    head = "".join(f"<th>{escape(c.variant)} − {escape(base)}</th>" for c in comparisons)
    body = []
    for i, problem in enumerate(order, start=1):
        prompt = prompts.get(problem, problem)
        text = prompt if len(prompt) <= 90 else prompt[:87] + "…"
        cells = "".join(
            f"<td>{rows[problem][c.variant]:+.2f}</td>"
            if c.variant in rows.get(problem, {})
            else "<td>–</td>"
            for c in comparisons
        )
        body.append(f"<tr><td>P{i}</td><td>{escape(text)}</td><td>{base_acc[problem]:.2f}</td>{cells}</tr>")
    return (
        '<details class="problems"><summary>Every problem (late stretch): the baseline\'s share of correct '
        "samples and each variant's difference; P1… number the problems as the per-problem figure does"
        f"</summary><table><thead><tr><th>#</th><th>prompt</th><th>{escape(base)}</th>{head}</tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table></details>"
    )


PLOT_DIFFERENCE: Final = "paired-difference"
PLOT_PROBLEMS: Final = "per-problem"


def difference_plot(comparisons: Sequence[PairedComparison], colors: Mapping[str, str]) -> Plot:
    """Accuracy − baseline at each shared validation, with its interval; the late stretch shaded."""
    title = "Validation accuracy against the baseline, paired by problem"
    if not comparisons or not any(c.per_step for c in comparisons):
        return Plot(
            PLOT_DIFFERENCE, title, "", None, "no variant shares validation samples with the baseline"
        )
    fig, (ax,) = _figure()
    base = comparisons[0].baseline
    for c in comparisons:
        if not c.per_step:
            continue
        xs = [s for s, _ in c.per_step]
        ys = [i.estimate for _, i in c.per_step]
        low = [i.estimate - i.low for _, i in c.per_step]
        high = [i.high - i.estimate for _, i in c.per_step]
        color = colors.get(c.variant, "#333333")
        ax.errorbar(
            xs,
            ys,
            yerr=[low, high],
            color=color,
            marker="o",
            markersize=3.5,
            capsize=2.5,
            linewidth=1.4,
            label=f"{c.variant} − {base}",
        )
        if c.late_steps:
            ax.axvspan(c.late_steps[0], c.late_steps[-1], color=color, alpha=0.08)
    ax.axhline(0.0, color="#555555", linestyle="--", linewidth=1, label="no difference")
    ax.set_xlabel("training step (validation)")
    ax.set_ylabel(f"accuracy − {base}'s")
    ax.set_title(title, fontsize=11)
    ax.legend(fontsize=8)
    counts = "; ".join(f"{c.variant}: {len(c.per_step)} validations" for c in comparisons)
    caption = (
        f"Each point: the mean over the shared problems of (variant's share of correct samples − {base}'s) "
        f"at one validation; bars: its {100 * LEVEL:.0f} % paired bootstrap interval (problems and samples "
        "resampled). A bar wholly above the dashed line at 0 is a validation the variant did better on. "
        f"The shaded span is the late stretch the verdict is read from. {counts}."
    )
    return Plot(PLOT_DIFFERENCE, title, caption, png_bytes(fig))


def problems_plot(comparisons: Sequence[PairedComparison], colors: Mapping[str, str]) -> Plot:
    """Per problem, each variant's late accuracy minus the baseline's: the problems it gains or loses."""
    title = "Which problems each variant gains or loses"
    drawn = [c for c in comparisons if c.per_problem]
    if not drawn:
        return Plot(PLOT_PROBLEMS, title, "", None, "no variant shares validation samples with the baseline")
    order, base_acc = problem_order(drawn)
    fig = Figure(figsize=(12.4, 1.2 + 2.1 * len(drawn)), layout="constrained")
    base = drawn[0].baseline
    axes = [fig.add_subplot(len(drawn), 1, i + 1) for i in range(len(drawn))]
    xs = list(range(1, len(order) + 1))
    for ax, c in zip(axes, drawn, strict=True):
        diff = {r.problem: r.difference for r in c.per_problem}
        ys = [diff.get(p, 0.0) for p in order]
        ax.bar(xs, ys, color=colors.get(c.variant, "#333333"), width=0.8)
        ax.axhline(0.0, color="#555555", linewidth=0.8)
        ax.set_ylim(-1.0, 1.0)
        ax.set_ylabel("Δ accuracy", fontsize=8)
        gains, losses, even = c.gains_losses()
        ax.set_title(
            f"{c.variant} − {base}: gains {gains}, loses {losses}, even on {even} problems "
            f"(late stretch, steps {c.late_steps[0]}–{c.late_steps[-1]})",
            fontsize=9,
        )
        ax.grid(True, axis="y", alpha=0.3)
        ax.set_xlim(0.4, len(order) + 0.6)
    step = max(1, len(order) // 30)
    for ax in axes:
        ax.set_xticks(xs[::step], [f"P{x}" for x in xs[::step]], fontsize=7)
    axes[-1].set_xlabel(f"problem, ordered by {base}'s accuracy (P1: the one it solves least often)")
    caption = (
        f"One bar per validation problem: the variant's share of correct samples over the late stretch minus "
        f"{base}'s. Up: the variant solves the problem more often; down: less often. Problems are numbered "
        f"from the one {base} solves least often ({min(base_acc.values()):.2f}) to the one it solves most "
        f"({max(base_acc.values()):.2f}); the table above lists them."
    )
    return Plot(PLOT_PROBLEMS, title, caption, png_bytes(fig))


__all__ = [
    "PLOT_DIFFERENCE",
    "PLOT_PROBLEMS",
    "REPLICA_LABEL",
    "SECTION_ID",
    "PairedComparison",
    "ProblemRow",
    "by_variant",
    "compare",
    "compare_all",
    "difference_plot",
    "paired_section",
    "problem_order",
    "problems_plot",
    "split_label",
]
