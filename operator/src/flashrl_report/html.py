"""The report page: one self-contained HTML file (the PNGs inlined as data: URIs, no script, no
external resource), so it can be mailed, attached to an issue or opened offline.

Written with ``html.escape`` and f-strings rather than a template engine: the page is a table, a
list and a column of figures, and the operator package should not grow a dependency for that.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from html import escape
from typing import Final

from flashrl_report.analysis import RunCost, Stat, VariantSummary
from flashrl_report.plots import Plot

STYLE: Final = """
body { font-family: "DejaVu Sans", system-ui, sans-serif; margin: 2rem auto; max-width: 1320px; color: #222;
       padding: 0 1rem; line-height: 1.4; }
h1 { font-size: 1.6rem; margin-bottom: .2rem; }
h2 { font-size: 1.2rem; margin-top: 2rem; border-bottom: 1px solid #ddd; }
.sources, .stats { color: #555; font-size: .85rem; }
.banner { background: #fff3cd; border: 1px solid #e0c36a; padding: .4rem .8rem; border-radius: 4px; }
table { border-collapse: collapse; font-size: .82rem; width: 100%; }
th, td { border: 1px solid #ddd; padding: .35rem .5rem; text-align: left; vertical-align: top; }
th { background: #f4f4f4; }
td .sub { color: #666; display: block; font-size: .75rem; }
.swatch { display: inline-block; width: .8rem; height: .8rem; border-radius: 2px; margin-right: .35rem; }
figure { margin: 1.2rem 0; }
figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { color: #555; font-size: .8rem; max-width: 1240px; }
.unavailable p { color: #8a6d3b; }
ul.notes li { margin: .2rem 0; }
details.problems { margin: .8rem 0; font-size: .82rem; }
details.problems summary { cursor: pointer; color: #555; }
td.verdict { font-weight: 600; }
"""


def data_uri(png: bytes) -> str:
    """A PNG as a ``data:`` URI."""
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _stat_cell(value: Stat | None, digits: int = 3) -> str:
    if value is None:
        return "<td>–</td>"
    spread = f" ± {value.spread:.{digits}g}" if value.std is not None else ""
    return (
        f"<td>{value.mean:.{digits}g}{spread}"
        f'<span class="sub">n={value.n}, steps {value.first_step}–{value.last_step}</span></td>'
    )


def _judged_cell(value: Stat | None, verdict: str | None, is_baseline: bool) -> str:
    """A validation figure with its spread and n, and what it says against the baseline."""
    if value is None:
        return "<td>–</td>"
    cell = _stat_cell(value)
    if value.std is None:
        cell = cell.replace("</td>", '<span class="sub">one validation: no spread</span></td>')
    said = "baseline" if is_baseline else verdict
    if said:
        cell = cell.replace("</td>", f'<span class="sub verdict">{escape(said)}</span></td>')
    return cell


def _score_cell(value: tuple[float, int] | None) -> str:
    if value is None:
        return "<td>–</td>"
    return f'<td>{value[0]:.3f}<span class="sub">step {value[1]}</span></td>'


def _steps_cell(summary: VariantSummary) -> str:
    """Training steps logged; for a run without any, the status's own step (never a bare 0 that the
    job's ``kubectl get`` STEP column would contradict)."""
    if summary.training_steps == 0 and summary.status_step is not None:
        return (
            f'<td>{escape(summary.status_step)}<span class="sub">step in the job\'s status</span>'
            '<span class="sub verdict">no training metrics</span></td>'
        )
    return f'<td>{summary.training_steps}<span class="sub">last step {summary.last_step}</span></td>'


def _row(summary: VariantSummary, color: str, is_baseline: bool) -> str:
    cells = [
        f'<td><span class="swatch" style="background:{color}"></span>{escape(summary.label)}'
        + (' <span class="sub">baseline</span>' if is_baseline else "")
        + (f'<span class="sub">{escape(summary.rollout)}</span>' if summary.rollout else "")
        + (' <span class="sub">fell back to BF16 (mismatch guard):</span>' if summary.stretches else "")
        + "".join(f'<span class="sub">{escape(line)}</span>' for line in summary.stretch_lines())
        + "</td>",
        _steps_cell(summary),
        _judged_cell(summary.best_score, summary.best_verdict, is_baseline),
        _score_cell(summary.final_score),
        _judged_cell(summary.late_score, summary.late_verdict, is_baseline),
        _stat_cell(summary.throughput, 4),
        _stat_cell(summary.late_throughput, 4),
    ]
    s = summary.speedup
    if is_baseline:
        cells.append("<td>1 (baseline)</td>")
    elif s is None:
        cells.append("<td>–</td>")
    else:
        change = escape(s.change())
        interval = escape(s.interval.text(unit="×")) if s.interval is not None else "–"
        cells.append(
            f'<td>{interval}<span class="sub verdict">{escape(s.verdict)}</span>'
            f'<span class="sub">n={s.overall.n} paired steps; per-step sd {s.overall.spread:.2g}; '
            f"{escape(s.metric)}</span>"
            f'<span class="sub">{change}</span></td>'
        )
    if summary.weight_sync_share is None:
        cells.append("<td>–</td>")
    else:
        share, n = summary.weight_sync_share
        cells.append(f'<td>{100 * share:.1f} %<span class="sub">n={n}</span></td>')
    drift = summary.mismatch_drift()
    if drift is not None:
        head, detail = drift
        cells.append(
            f'<td>{escape(head)}<span class="sub">{escape(summary.mismatch_key or "")}</span>'
            f'<span class="sub">{escape(detail)}</span></td>'
        )
    elif summary.mismatch_key is not None:
        cells.append('<td>–<span class="sub">too few steps for quarters</span></td>')
    else:
        cells.append("<td>–</td>")
    cells.append(_stat_cell(summary.step_seconds, 3))
    cells.extend(_cost_cells(summary.cost))
    return "<tr>" + "".join(cells) + "</tr>"


def _cost_cells(cost: RunCost | None) -> list[str]:
    """Hours to the common score (wall clock, then GPU-hours) and GPU-hours held, split by pool."""
    if cost is None:
        return ["<td>–</td>", "<td>–</td>"]
    if cost.hours_to_score is None:
        to_score = '<td>–<span class="sub">not reached</span></td>'
    else:
        hours, step = cost.hours_to_score
        gpu_hours = "" if cost.gpu_hours_to_score is None else f", {cost.gpu_hours_to_score:.1f} GPU-h"
        to_score = f'<td>{hours:.2f} h<span class="sub">step {step}{gpu_hours}</span></td>'
    pools = "".join(
        f'<span class="sub">{escape(pool)} {hours:.1f}</span>' for pool, hours in cost.by_pool.items()
    )
    return [to_score, f"<td>{cost.held_gpu_hours:.1f}{pools}</td>"]


HEADERS: Final = (
    "variant",
    "training steps",
    "best validation score (best quarter of validations in a row)",
    "final validation score",
    "late validation score (last quarter of validations)",
    "throughput, tokens/s/GPU (all steps)",
    "late-run throughput (last quarter)",
    "generation speed-up over the baseline",
    "weight-sync share of step time",
    "mismatch, first → last quarter",
    "time per step, s",
    "hours to the common validation score (training + validation)",
    "GPU-hours held (by pool)",
)


def render_html(
    *,
    title: str,
    banner: str | None,
    sources: Sequence[tuple[str, Sequence[str]]],
    summaries: Sequence[VariantSummary],
    colors: Sequence[str],
    baseline: str | None,
    score_key: str | None,
    baseline_note: str,
    notes: Sequence[str],
    plots: Sequence[Plot],
    sections: Sequence[str] = (),
    verdicts: Sequence[str] = (),
    notice: str | None = None,
) -> str:
    """The whole page; ``sections`` (HTML, already escaped) follow the summary. ``verdicts``: one line
    per variant, the page's opening; ``notice``: a second banner (runs without training metrics)."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
    ]
    if banner:
        parts.append(f'<p class="banner">{escape(banner)}</p>')
    if notice:
        parts.append(f'<p class="banner" id="no-metrics">{escape(notice)}</p>')
    if verdicts:
        parts.append('<section id="verdict"><h2>Verdict</h2><ul class="verdicts">')
        parts.extend(f"<li>{escape(line)}</li>" for line in verdicts)
        parts.append("</ul></section>")
    source_text = "; ".join(f"{escape(label)}: {escape(', '.join(paths))}" for label, paths in sources)
    parts.append(f'<p class="sources">Metrics: {source_text}</p>')
    parts.append('<section id="summary"><h2>Summary</h2><table><thead><tr>')
    parts.extend(f"<th>{escape(h)}</th>" for h in HEADERS)
    parts.append("</tr></thead><tbody>")
    for summary, color in zip(summaries, colors, strict=True):
        parts.append(_row(summary, color, summary.label == baseline))
    parts.append("</tbody></table>")
    score = escape(score_key) if score_key else "no validation score"
    parts.append(
        f'<p class="stats">Validation score: {score}. Every mean is given with the standard deviation of its '
        "per-step values and the number of steps (n) it averages. A drift, or a difference in validation "
        "score without validation samples, is only called one when it exceeds that step-to-step spread; "
        "otherwise the table says there is no clear difference. The best validation score is the best "
        "mean of a quarter of the validations in a row (a single high validation is a spike, not a best); "
        "without validation samples, best and late scores are judged against the baseline's by the same "
        "rule; with them, the late score's verdict is the paired comparison below. "
        "The generation speed-up is the mean per-step ratio of the baseline's generation cost to the "
        "variant's, paired by step (the runs share seed and data), over the steps both logged, with a 95 % "
        "bootstrap interval over those steps: faster or slower only when it excludes 1; its quarters show "
        f"whether it holds over the whole run; {escape(baseline_note)}.</p></section>"
    )
    parts.extend(sections)
    parts.append('<section id="notes"><h2>Missing or partial data</h2>')
    if notes:
        parts.append('<ul class="notes">' + "".join(f"<li>{escape(n)}</li>" for n in notes) + "</ul>")
    else:
        parts.append("<p>Every run logged every metric the report draws.</p>")
    parts.append("</section>")
    parts.append('<section id="plots"><h2>Figures</h2>')
    for plot in plots:
        if plot.png is None:
            parts.append(
                f'<figure id="plot-{plot.id}" class="plot unavailable"><h3>{escape(plot.title)}</h3>'
                f"<p>Not available: {escape(plot.unavailable)}.</p></figure>"
            )
            continue
        parts.append(
            f'<figure id="plot-{plot.id}" class="plot"><img src="{data_uri(plot.png)}" '
            f'alt="{escape(plot.title)}" data-file="{escape(plot.id)}.png">'
            f"<figcaption>{escape(plot.caption)}</figcaption></figure>"
        )
    parts.append("</section></body></html>\n")
    return "\n".join(parts)


__all__ = ["HEADERS", "data_uri", "render_html"]
