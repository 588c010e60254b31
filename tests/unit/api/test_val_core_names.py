"""One reading of verl's core validation names (``val-core/<source>/<var>/<metric>``) for the status, the
exporter and the report: with several samples per problem verl 0.9.1 logs ``mean@N`` beside the bootstrap
``best@N/mean``, ``best@N/std``, ``maj@N/mean`` and ``maj@N/std`` (the names its real trainer wrote with
``val_kwargs.n=2``), and the validation score is always ``mean@N``, whatever the data source holds."""

from __future__ import annotations

import pytest

from flashrl_api import verl_metrics as vm
from flashrl_api.exported_metrics import status_metric_names
from flashrl_jobs.run_metrics import Record, RunState
from flashrl_report.analysis import score_key
from flashrl_report.data import RunMetrics

SOURCE = "openai/gsm8k"
#: What verl 0.9.1's real trainer logged at a validation with two samples per problem.
REAL = {
    f"val-core/{SOURCE}/acc/mean@2": 0.25,
    f"val-core/{SOURCE}/acc/best@2/mean": 0.375,
    f"val-core/{SOURCE}/acc/best@2/std": 0.1,
    f"val-core/{SOURCE}/acc/maj@2/mean": 0.3,
    f"val-core/{SOURCE}/acc/maj@2/std": 0.05,
    f"val-aux/{SOURCE}/reward/mean@2": 0.25,
    f"val-aux/{SOURCE}/acc/worst@2/mean": 0.1,
}
SCORE = f"val-core/{SOURCE}/acc/mean@2"


@pytest.mark.parametrize(
    ("name", "source", "var", "metric", "mean"),
    [
        (SCORE, SOURCE, "acc", "mean@2", True),
        (f"val-core/{SOURCE}/acc/best@2/mean", SOURCE, "acc", "best@2/mean", False),
        (f"val-core/{SOURCE}/acc/best@2/std", SOURCE, "acc", "best@2/std", False),
        (f"val-core/{SOURCE}/acc/maj@2/mean", SOURCE, "acc", "maj@2/mean", False),
        ("val-core/aime-2024/reward/mean@32", "aime-2024", "reward", "mean@32", True),
        ("val-core/a/b/c/acc/maj@16/mean", "a/b/c", "acc", "maj@16/mean", False),
    ],
)
def test_a_core_name_reads_apart_at_its_metric_not_at_its_last_slash(
    name: str, source: str, var: str, metric: str, mean: bool
) -> None:
    parsed = vm.parse_val_core(name)
    assert parsed == vm.ValCoreName(source, var, metric)
    assert parsed.is_mean is mean
    assert vm.is_validation_score(name) is mean


@pytest.mark.parametrize(
    "name",
    [
        f"val-aux/{SOURCE}/acc/mean@2",
        f"val-core/{SOURCE}/acc/best@2",  # not a shape verl 0.9.1 writes: best@N always has /mean or /std
        f"val-core/{SOURCE}/acc/mean",
        f"val-core/{SOURCE}/acc/worst@2/mean",
        "val-core/mean@2",
    ],
)
def test_other_names_are_not_core_validation_metrics(name: str) -> None:
    assert vm.parse_val_core(name) is None
    assert not vm.is_validation_score(name)


def test_the_mean_comes_first_among_the_core_names() -> None:
    assert vm.val_core_keys(REAL)[0] == SCORE
    assert set(vm.val_core_keys(REAL)) == {n for n in REAL if n.startswith("val-core/")}


def test_the_status_the_exporter_and_the_report_score_the_mean() -> None:
    names = status_metric_names(REAL)
    assert names[0] == SCORE
    assert [n for n in names if vm.is_validation_score(n)] == [SCORE]
    state = RunState(total_steps=3)
    state.add(Record(1, dict(REAL)), now=1_700_000_000.0)
    score = state.validation_score()
    assert score is not None and score.name == SCORE and score.value == 0.25
    runs = [RunMetrics("a", steps={1: dict(REAL)}), RunMetrics("b", steps={1: dict(REAL)})]
    assert score_key(runs) == SCORE


def test_a_run_that_logged_only_bootstrap_statistics_has_no_score() -> None:
    only = {k: v for k, v in REAL.items() if k != SCORE}
    assert score_key([RunMetrics("a", steps={1: only})]) is None
    state = RunState(total_steps=3)
    state.add(Record(1, only), now=1_700_000_000.0)
    assert state.validation_score() is None
