"""The history fold costs what the kept history costs, and drops what a status cannot really hold.

A job's status is written by whoever holds the launcher's token, so ``add_metrics`` must neither spend
per-doubling work on a step near 2**62 nor keep names, steps or values verl never logs. The thinning
itself must stay what it was: the reference below is the algorithm before the stride was computed
directly (one render per stride tried), and the two agree on every input here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import pytest

from flashrl_api import history
from flashrl_api import verl_metrics as vm
from flashrl_api.history import (
    MAX_STEP,
    MAX_VALUE,
    RECENT_STEPS,
    add_metrics,
    add_step,
    parse_history,
    plausible_metrics,
    plausible_name,
    plausible_value,
    render_history,
)
from flashrl_report.synthetic import records


def _reference(records_: Mapping[int, Mapping[str, float]], max_bytes: int) -> str:
    """The algorithm before: try strides 1, 2, 4, ... rendering the whole history at each."""
    present = {s: v for s, v in records_.items() if v}
    latest = max(present, default=0)
    text = ""
    for keep_validations in (True, False):
        stride = 1
        while True:
            chosen = {
                s: v
                for s, v in present.items()
                if s % stride == 0
                or s > latest - RECENT_STEPS
                or (keep_validations and any(k.startswith(vm.VAL_CORE_PREFIX) for k in v))
            }
            text = "".join(history._line(s, chosen[s]) + "\n" for s in sorted(chosen))
            if len(text.encode("utf-8")) <= max_bytes:
                return text
            if stride > latest:
                break
            stride *= 2
    return text


def _run(steps: int) -> dict[int, dict[str, float]]:
    return {r["step"]: history.kept(r["data"]) for r in records("bf16", steps)}


@pytest.mark.parametrize("max_bytes", [10**9, 200_000, 60_000, 20_000, 4_000, 500, 10])
def test_the_thinning_is_the_old_algorithms_on_ordinary_runs(max_bytes: int) -> None:
    run = _run(400)
    assert render_history(run, max_bytes) == _reference(run, max_bytes)


def test_the_thinning_is_the_old_algorithms_on_odd_shapes() -> None:
    shapes: list[dict[int, dict[str, float]]] = [
        {},
        {0: {"a": 1.0}},
        {0: {}, 3: {"a": 1.0}},
        {s: {"val-core/x/acc/mean@1": 0.5, "pad": float(s)} for s in range(0, 3000, 7)},
        {**{s: {"a": float(s)} for s in range(1, 900)}, 2**40: {"a": 1.0}},
        {-4: {"a": 1.0}, -3: {"a": 2.0}, 5: {"a": 3.0}},
    ]
    for shape in shapes:
        for max_bytes in (10**9, 5_000, 300, 0):
            assert render_history(shape, max_bytes) == _reference(shape, max_bytes)


def test_a_step_replayed_one_by_one_gives_the_old_history() -> None:
    old = new = ""
    for record in records("blockwise-fp8", 300):
        new = add_step(new, record["step"], record["data"], max_bytes=40_000)
        merged = parse_history(old)
        merged[record["step"]] = {**merged.get(record["step"], {}), **history.kept(record["data"])}
        old = _reference(merged, 40_000)
    assert new == old


def test_each_line_is_rendered_once_whatever_the_steps_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    """A full history of validation scores at steps near 2**31 (the largest a status may carry), which
    the old algorithm rendered once per doubling, twice over (with and without validations)."""
    name = "val-core/" + "s" * 200 + "/acc/mean@1"
    full = {MAX_STEP - 3 * i: {name: 0.5} for i in range(3000)}
    text = render_history(full)
    assert len(text.encode()) <= history.MAX_HISTORY_BYTES
    renders = 0
    line = history._line

    def counted(step: int, data: Mapping[str, float]) -> str:
        nonlocal renders
        renders += 1
        return line(step, data)

    monkeypatch.setattr(history, "_line", counted)
    kept = parse_history(text)
    hostile = [{"name": name, "value": 0.25, "step": MAX_STEP - 1 - 3 * i} for i in range(64)]
    after = add_metrics(text, hostile, total_steps=MAX_STEP)
    assert renders <= len(kept) + len(hostile)
    assert len(after.encode()) <= history.MAX_HISTORY_BYTES
    merged = {**kept, **{m["step"]: {name: 0.25} for m in hostile}}
    assert after == _reference(merged, history.MAX_HISTORY_BYTES)


def test_a_status_that_adds_nothing_costs_no_render(monkeypatch: pytest.MonkeyPatch) -> None:
    text = add_metrics("", [{"name": vm.THROUGHPUT, "value": 480.0, "step": 3}])
    monkeypatch.setattr(history, "render_history", lambda *a, **k: pytest.fail("rendered"))
    assert add_metrics(text, [{"name": vm.THROUGHPUT, "value": 480.0, "step": 3}]) == text


def test_steps_beyond_the_jobs_total_or_any_real_one_are_dropped() -> None:
    score = "val-core/aime/acc/mean@1"
    metrics = [
        {"name": score, "value": 0.25, "step": 150},
        {"name": score, "value": 0.5, "step": 151},  # beyond spec.training.totalSteps
        {"name": score, "value": 0.5, "step": 2**62 + 7},  # beyond any job's total
        {"name": score, "value": 0.5, "step": -1},
        {"name": score, "value": 0.5, "step": True},
        {"name": score, "value": 0.5, "step": 3.0},
    ]
    assert plausible_metrics(metrics, total_steps=150) == {150: {score: 0.25}}
    assert set(plausible_metrics(metrics)) == {150, 151}
    assert add_metrics("", [{"name": score, "value": 0.5, "step": 2**62}]) == ""


def test_names_verl_never_logs_are_dropped() -> None:
    assert plausible_name(vm.THROUGHPUT)
    assert plausible_name("val-core/aime-2024/acc/mean@16")
    assert plausible_name("val-core/aime-2024/acc/maj@16/mean")
    assert plausible_name("timing_s/update_weights")
    assert not plausible_name("val-core/junk")  # not verl's val-core/<source>/<var>/<metric>
    assert not plausible_name("val-core/a/acc/std@4")
    assert not plausible_name("timing_s/<script>")
    assert not plausible_name("timing_s/" + "x" * 100)
    assert not plausible_name("val-core/" + "s" * 300 + "/acc/mean@1")
    assert not plausible_name("actor/pg_loss")  # verl logs it; the history does not keep it
    assert not plausible_name("my/own/metric")


@pytest.mark.parametrize(
    "value",
    [math.nan, math.inf, -math.inf, 1e308, -1e308, MAX_VALUE * 10, 10**400, True, "0.5", None, [1.0]],
)
def test_values_that_cannot_be_real_are_dropped(value: object) -> None:
    assert plausible_value(value) is None
    assert plausible_metrics([{"name": vm.THROUGHPUT, "value": value, "step": 1}]) == {}


def test_real_values_are_kept_as_floats() -> None:
    assert plausible_value(3) == 3.0
    assert plausible_value(-0.25) == -0.25
    assert plausible_value(MAX_VALUE) == MAX_VALUE
    assert plausible_metrics(["not a mapping", {"name": vm.ENTROPY, "value": 1, "step": 0}]) == {  # type: ignore[list-item]
        0: {vm.ENTROPY: 1.0}
    }


def test_the_launcher_never_reports_a_name_the_crd_refuses() -> None:
    from flashrl_api.exported_metrics import status_metric_names
    from flashrl_api.status import MetricValue

    odd = ["val-core/my data/acc/mean@1", "timing_s/gen\n", "val-core/" + "s" * 300 + "/acc/mean@1"]
    assert status_metric_names([*odd, vm.THROUGHPUT]) == [vm.THROUGHPUT]
    for name in odd:
        with pytest.raises(ValueError):
            MetricValue(name=name, value=1.0, step=1)
    with pytest.raises(ValueError):
        MetricValue(name=vm.THROUGHPUT, value=1.0, step=MAX_STEP + 1)
