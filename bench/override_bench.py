"""verl override checking at the CRD's maximum: the linear screen against one composition per bad override.

``check_user_overrides`` is what ``flashrl validate`` and the operator run on every new spec. At the
CRD's maximum (``MAX_OVERRIDES`` overrides of ``MAX_OVERRIDE_LENGTH`` characters) it is measured three
ways: every override valid, every override naming an unknown key, and half of each. "Before" is the
same function with the screen switched off (each rejected override found by composing the rest
again), which is how it worked before the screen; "after" is the shipped code. Compositions are
counted at ``verl_config._compose``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from flashrl_api import parse_job
from flashrl_api.spec import MAX_OVERRIDE_LENGTH, MAX_OVERRIDES
from flashrl_jobs import verl_config


def _overrides(kind: str) -> list[str]:
    out = []
    for i in range(MAX_OVERRIDES):
        bad = kind == "invalid" or (kind == "half" and i % 2 == 1)
        head = f"trainer.unknown_{i:03d}=" if bad else f"+trainer.extra_{i:03d}="
        out.append(head + "v" * (MAX_OVERRIDE_LENGTH - len(head)))
    return out


def _measure(overrides: list[str], screen: bool) -> tuple[float, int, int]:
    job = parse_job(
        {
            "apiVersion": "flashrl.dev/v1alpha1",
            "kind": "FlashRLJob",
            "metadata": {"name": "b"},
            "spec": {"overrides": overrides},
        }
    )
    calls = [0]
    real_compose = verl_config._compose
    real_screen = verl_config.screen_overrides

    def counting(overrides: Any, resolve: bool = True) -> Any:
        calls[0] += 1
        return real_compose(overrides, resolve)

    off: Callable[..., dict[int, str]] = lambda *_args: {}  # noqa: E731
    real_cap = verl_config.MAX_FALLBACK_COMPOSITIONS
    verl_config._compose = counting  # type: ignore[assignment]
    verl_config.screen_overrides = real_screen if screen else off  # type: ignore[assignment]
    # Before the screen there was no cap on the compositions spent finding culprits either.
    verl_config.MAX_FALLBACK_COMPOSITIONS = real_cap if screen else 10**6  # type: ignore[misc]
    verl_config._composition.cache_clear()
    try:
        start = time.perf_counter()
        problems = verl_config.check_user_overrides(job)
        elapsed = time.perf_counter() - start
    finally:
        verl_config._compose = real_compose  # type: ignore[assignment]
        verl_config.screen_overrides = real_screen  # type: ignore[assignment]
        verl_config.MAX_FALLBACK_COMPOSITIONS = real_cap  # type: ignore[misc]
    return elapsed, calls[0], len(problems)


def run() -> str:
    """The markdown section."""
    verl_config.compose_config([])  # warm Hydra's imports so the first row is not charged for them
    rows = []
    for kind, label in (
        ("valid", "all valid"),
        ("half", "half unknown keys"),
        ("invalid", "all unknown keys"),
    ):
        overrides = _overrides(kind)
        before = _measure(overrides, screen=False)
        after = _measure(overrides, screen=True)
        assert before[2] == after[2], (kind, before, after)
        rows.append(
            f"| {label} | {after[2]} | {before[1]} | {before[0]:.1f} s | {after[1]} | {after[0]:.1f} s "
            f"| {before[0] / after[0]:.1f}x |"
        )
    return (
        f"## verl overrides at the CRD's maximum ({MAX_OVERRIDES} x {MAX_OVERRIDE_LENGTH} characters)\n\n"
        "`flashrl_jobs.verl_config.check_user_overrides`, which `flashrl validate` and the operator run on "
        "every new spec, against the pinned verl config. Before: each rejected override found by composing "
        "the remaining list again (compositions grow with the number of bad overrides, each composition "
        "with the list's length). After: the base config composed once, each override applied to it alone "
        "with Hydra's own override code, the survivors composed once.\n\n"
        "| overrides | problems | compositions before | time before | compositions after | time after "
        "| speed-up |\n|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n"
    )


if __name__ == "__main__":
    print(run())
