"""Golden verl command lines, each composed against the installed (pinned) verl config.

One golden file per rollout quantization mode and per TIS level, under ``tests/unit/jobs/golden/``: the
argument list after ``python3 -m verl.trainer.main_ppo``, one override per line. A change to
``verl_args`` shows up as a reviewable diff of these files. Regenerate them after an intended change:

    FLASHRL_UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/jobs/test_verl_args_golden.py
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from flashrl_api import FlashRLJob, parse_job
from flashrl_jobs.verl_args import ENTRY_MODULE, verl_argv
from flashrl_jobs.verl_config import compose_config

GOLDEN = Path(__file__).parent / "golden"

#: name -> spec fragment. Every quantization mode (token TIS), every TIS level (blockwise FP8), and the
#: quantizations vLLM supports.
CASES: dict[str, dict[str, Any]] = {
    "blockwise-fp8-tis-token": {},
    "channel-fp8-tis-token": {"rollout": {"quantization": "channel-fp8"}},
    "bf16-tis-token": {"rollout": {"quantization": "bf16"}},
    "blockwise-fp8-tis-sequence": {"correction": {"tis": {"level": "sequence", "cap": 5.0}}},
    "blockwise-fp8-tis-off": {"correction": {"tis": {"level": "off"}}},
    "bf16-kv-fp8-e4m3-tis-token": {"rollout": {"quantization": "bf16", "kvCache": "fp8-e4m3"}},
    "blockwise-fp8-kv-fp8-e4m3-tis-token": {"rollout": {"kvCache": "fp8-e4m3"}},
    # What the mismatch guard's FallbackToBF16 renders (flashrl_api.precision.fallback_spec).
    "fallback-bf16-kv-bf16-tis-token": {"rollout": {"quantization": "bf16", "kvCache": "bf16"}},
    "vllm-blockwise-fp8-tis-token": {"rollout": {"engine": "vllm"}},
    "vllm-bf16-tis-token": {"rollout": {"engine": "vllm", "quantization": "bf16"}},
}
#: The SGLang kv_cache_dtype each case's kvCache renders (None: the engine's default, nothing rendered).
KV_CACHE_DTYPE: dict[str, str] = {"fp8-e4m3": "fp8_e4m3", "bf16": "bf16"}


def job(spec: dict[str, Any], name: str = "golden") -> FlashRLJob:
    return parse_job(
        {
            "apiVersion": "flashrl.dev/v1alpha1",
            "kind": "FlashRLJob",
            "metadata": {"name": name, "namespace": "default"},
            "spec": spec,
        }
    )


def golden_overrides(case: str) -> list[str]:
    argv = verl_argv(job(CASES[case]))
    assert argv[:3] == ["python3", "-m", ENTRY_MODULE]
    return argv[3:]


@pytest.mark.parametrize("case", sorted(CASES))
def test_argv_matches_golden_file(case: str) -> None:
    path = GOLDEN / f"{case}.txt"
    overrides = golden_overrides(case)
    if os.environ.get("FLASHRL_UPDATE_GOLDEN") == "1":
        path.write_text("\n".join(overrides) + "\n", encoding="utf-8")
    assert path.is_file(), f"{path} is missing; regenerate with FLASHRL_UPDATE_GOLDEN=1"
    assert path.read_text(encoding="utf-8").splitlines() == overrides


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden_argv_composes_against_pinned_verl(case: str) -> None:
    cfg = compose_config((GOLDEN / f"{case}.txt").read_text(encoding="utf-8").splitlines())
    spec = job(CASES[case]).spec
    rollout = cfg.actor_rollout_ref.rollout
    correction = cfg.algorithm.rollout_correction
    # The values verl will actually see, after Hydra merged the overrides into its defaults.
    assert rollout.name == spec.rollout.engine
    assert rollout.calculate_log_probs is True
    assert (rollout.temperature, rollout.top_p, rollout.top_k) == (1.0, 1.0, -1)
    assert cfg.trainer.n_gpus_per_node == spec.resources.gpus_per_node
    assert cfg.reward.reward_kwargs.overlong_buffer_cfg.len == spec.training.overlong_buffer.length
    if spec.rollout.quantization == "blockwise-fp8":
        assert rollout.quantization == "fp8"
        assert rollout.load_format == "dummy"
    elif spec.rollout.quantization == "channel-fp8":
        assert rollout.quantization is None
        assert rollout.load_format == "flash_rl"
        assert rollout.engine_kwargs.sglang.quantization == "fp8"
    else:
        assert rollout.quantization is None
        assert rollout.load_format == "dummy"
    assert rollout.engine_kwargs.sglang.get("kv_cache_dtype") == KV_CACHE_DTYPE.get(spec.rollout.kv_cache)
    level = spec.correction.tis.level
    assert correction.rollout_is == (None if level == "off" else level)
    assert correction.rollout_is_threshold == spec.correction.tis.cap
    assert correction.bypass_mode is False
    assert correction.rollout_rs is None


def test_golden_files_have_no_strays() -> None:
    """Every golden file belongs to a case, so a renamed case cannot leave a stale file behind."""
    assert {p.stem for p in GOLDEN.glob("*.txt")} == set(CASES)
