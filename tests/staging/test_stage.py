"""``flashrl-launch stage`` for real: the real huggingface_hub client against a loopback fake of the Hub.

Each test runs the console script in a subprocess (as the staging Job runs it), with ``HF_ENDPOINT``
pointing at :mod:`fake_hub`, and the job's volumes as temporary directories.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from fake_hub import FakeHub, Repo, serve

from flashrl_api import parse_spec
from flashrl_api.staging import staging_plan
from flashrl_jobs import contract

pytestmark = pytest.mark.staging

LAUNCH = str(Path(sys.executable).with_name("flashrl-launch"))
MODEL = "tiny-org/tiny-model"
TRAIN = "tiny-org/math-train"
VAL = "tiny-org/math-val"


def parquet(rows: int = 3, *, drop: str | None = None) -> bytes:
    """A data file in verl's RL format (the DAPO-Math-17k layout), optionally without one column."""
    columns: dict[str, Any] = {
        "data_source": ["math_dapo"] * rows,
        "prompt": [[{"role": "user", "content": f"What is {i} + {i}?"}] for i in range(rows)],
        "ability": ["MATH"] * rows,
        "reward_model": [
            {"ground_truth": str(2 * i), "style": "rule-lighteval/MATH_v2"} for i in range(rows)
        ],
        "extra_info": [{"index": str(i)} for i in range(rows)],
    }
    if drop is not None:
        columns.pop(drop)
    out = io.BytesIO()
    pq.write_table(pa.table(columns), out)
    return out.getvalue()


def model_files() -> dict[str, bytes]:
    return {
        "config.json": json.dumps({"model_type": "qwen3", "num_attention_heads": 4}).encode(),
        "tokenizer.json": b'{"version": "1.0"}',
        "model.safetensors": bytes(range(256)) * 40,  # LFS-sized
        "pytorch_model.bin": b"x" * 2048,  # a duplicate format the staging skips
    }


@pytest.fixture
def hub() -> Any:
    fake = FakeHub()
    fake.add("model", MODEL, Repo(model_files()))
    fake.add("dataset", TRAIN, Repo({"data/train.parquet": parquet(5), "README.md": b"# train"}))
    fake.add("dataset", VAL, Repo({"data/val.parquet": parquet(2)}, commit="f" * 40))
    with serve(fake):
        yield fake


def write_job(tmp_path: Path, **spec: Any) -> Path:
    base: dict[str, Any] = {
        "model": {"source": f"hf://{MODEL}"},
        "data": {
            "train": f"hf://datasets/{TRAIN}/data/train.parquet",
            "validation": f"hf://datasets/{VAL}@main/data/val.parquet",
        },
        "storage": {
            "modelCache": {"claimName": "hf-cache", "mountPath": str(tmp_path / "models")},
            "data": {"claimName": "rl-data", "mountPath": str(tmp_path / "data"), "readOnly": True},
            "checkpoints": {"claimName": "ckpt", "mountPath": str(tmp_path / "ckpt")},
        },
    }
    for key, value in spec.items():
        base[key] = value if isinstance(value, list) else {**base.get(key, {}), **value}
    manifest = {
        "apiVersion": "flashrl.dev/v1alpha1",
        "kind": "FlashRLJob",
        "metadata": {"name": "stage-test", "namespace": "rl"},
        "spec": base,
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(manifest), encoding="utf-8")
    return path


def stage(hub: FakeHub, job: Path, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {
        k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING")) and k != "FLASHRL_SPEC"
    }
    environ.update(
        {
            "HF_ENDPOINT": hub.url,
            "HF_HOME": str(tmp_path / "hf-home"),  # no token or cache of the machine's user
            "HF_HUB_DISABLE_TELEMETRY": "1",
            "FLASHRL_TERMINATION_LOG": str(tmp_path / "termination-log"),
            "NO_PROXY": "127.0.0.1",
            **env,
        }
    )
    return subprocess.run(
        [LAUNCH, "stage", "--spec", str(job)], env=environ, capture_output=True, text=True, timeout=120
    )


def plan_for(job: Path) -> Any:
    return staging_plan(parse_spec(yaml.safe_load(job.read_text())["spec"]))


def test_first_run_downloads_and_verifies_second_run_downloads_nothing(hub: FakeHub, tmp_path: Path) -> None:
    job = write_job(tmp_path)
    first = stage(hub, job, tmp_path)
    assert first.returncode == 0, first.stderr
    model, train, val = plan_for(job)
    # The model repository without the duplicate .bin weights; each data file alone.
    assert sorted(p.name for p in Path(model.directory).iterdir() if not p.name.startswith(".")) == [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
    ]
    assert Path(model.directory, "model.safetensors").read_bytes() == model_files()["model.safetensors"]
    assert pq.read_table(train.path).num_rows == 5
    assert pq.read_table(val.path).num_rows == 2
    marker = json.loads(Path(model.marker).read_text())
    assert marker["commit"] == "0123456789abcdef0123456789abcdef01234567"
    assert marker["source"] == f"hf://{MODEL}@main"
    assert {f["path"] for f in marker["files"]} == {"config.json", "model.safetensors", "tokenizer.json"}
    assert next(f for f in marker["files"] if f["path"] == "model.safetensors")["sha256"]
    assert json.loads(Path(val.marker).read_text())["commit"] == "f" * 40
    assert len(hub.downloads()) == 5
    assert "5/5 files" in first.stderr

    hub.requests.clear()
    second = stage(hub, job, tmp_path)
    assert second.returncode == 0, second.stderr
    assert hub.requests == []  # not even a metadata request
    assert second.stderr.count("already staged") == 3
    assert "0.00 GB downloaded in this run" in second.stderr


def test_staged_sources_need_no_network_offline(hub: FakeHub, tmp_path: Path) -> None:
    job = write_job(tmp_path)
    assert stage(hub, job, tmp_path).returncode == 0
    offline = stage(hub, job, tmp_path, HF_HUB_OFFLINE="1", HF_ENDPOINT="http://127.0.0.1:9")
    assert offline.returncode == 0, offline.stderr
    other = write_job(tmp_path, model={"source": f"hf://{MODEL}@v2"})
    refused = stage(hub, other, tmp_path, HF_HUB_OFFLINE="1")
    assert refused.returncode == contract.EXIT_STAGING_FAILED
    assert refused.stderr.strip().splitlines()[-1].startswith("flashrl-launch: NotStagedOffline: ")


def test_a_half_finished_download_is_not_staged(hub: FakeHub, tmp_path: Path) -> None:
    job = write_job(tmp_path)
    assert stage(hub, job, tmp_path).returncode == 0
    model = plan_for(job)[0]
    weights = Path(model.directory, "model.safetensors")
    weights.write_bytes(weights.read_bytes()[:100])  # truncated, as by a killed copy
    hub.requests.clear()
    again = stage(hub, job, tmp_path)
    assert again.returncode == 0, again.stderr
    assert weights.read_bytes() == model_files()["model.safetensors"]
    assert any(path.endswith("model.safetensors") for path in hub.downloads())


def _failure(result: subprocess.CompletedProcess[str], tmp_path: Path) -> str:
    assert result.returncode == contract.EXIT_STAGING_FAILED, result.stderr
    return (tmp_path / "termination-log").read_text()


def test_a_corrupted_file_fails_with_checksum_mismatch_and_no_marker(hub: FakeHub, tmp_path: Path) -> None:
    hub.repos[("model", MODEL)].corrupt.add("model.safetensors")
    job = write_job(tmp_path)
    reason = _failure(stage(hub, job, tmp_path), tmp_path)
    assert reason.startswith("ChecksumMismatch: tiny-org/tiny-model/model.safetensors: sha256 ")
    model = plan_for(job)[0]
    assert not Path(model.marker).exists()
    assert not Path(model.directory, "model.safetensors").exists()


def test_a_data_file_without_a_required_column_fails(hub: FakeHub, tmp_path: Path) -> None:
    hub.add("dataset", TRAIN, Repo({"data/train.parquet": parquet(drop="reward_model")}))
    job = write_job(tmp_path)
    reason = _failure(stage(hub, job, tmp_path), tmp_path)
    assert reason.startswith("MissingColumn: ")
    assert "has no column reward_model" in reason
    assert not Path(plan_for(job)[1].marker).exists()


def test_a_prompt_key_the_file_lacks_fails(hub: FakeHub, tmp_path: Path) -> None:
    job = write_job(tmp_path, data={"promptKey": "question"})
    reason = _failure(stage(hub, job, tmp_path), tmp_path)
    assert reason.startswith("MissingColumn: ") and "no column question" in reason


def test_the_prompt_key_an_override_sets_is_the_one_checked(hub: FakeHub, tmp_path: Path) -> None:
    # verl reads the column spec.overrides names (it replaces data.promptKey's), so staging checks that.
    job = write_job(tmp_path, overrides=["data.prompt_key='question'"])
    reason = _failure(stage(hub, job, tmp_path), tmp_path)
    assert reason.startswith("MissingColumn: ") and "no column question" in reason


@pytest.mark.parametrize(
    ("spec", "cause"),
    [
        ({"model": {"source": "hf://tiny-org/no-such-model"}}, "RepositoryNotFound"),
        ({"model": {"source": f"hf://{MODEL}@no-such-branch"}}, "RevisionNotFound"),
        ({"data": {"train": f"hf://datasets/{TRAIN}/data/missing.parquet"}}, "FileNotFound"),
    ],
)
def test_hub_refusals_have_their_cause(
    hub: FakeHub, tmp_path: Path, spec: dict[str, Any], cause: str
) -> None:
    reason = _failure(stage(hub, write_job(tmp_path, **spec), tmp_path), tmp_path)
    assert reason.startswith(f"{cause}: ")


def test_a_gated_model_needs_its_token(hub: FakeHub, tmp_path: Path) -> None:
    hub.repos[("model", MODEL)].gated_token = "hf_secret"
    job = write_job(tmp_path)
    reason = _failure(stage(hub, job, tmp_path), tmp_path)
    assert reason.startswith("GatedRepository: tiny-org/tiny-model is gated")
    assert stage(hub, job, tmp_path, HF_TOKEN="hf_secret").returncode == 0


def test_a_volume_too_small_fails_before_downloading(hub: FakeHub, tmp_path: Path) -> None:
    hub.add("model", MODEL, Repo({"config.json": b"{}"}))
    # Reported sizes come from the Hub: a repository larger than the volume's free space.
    original = hub.info

    def huge(*args: Any) -> Any:
        status, headers, body = original(*args)
        data = json.loads(body)
        for sibling in data.get("siblings", []):
            sibling["size"] = 10**18  # an exabyte: more than any volume has free
        return status, headers, json.dumps(data).encode()

    hub.info = huge  # type: ignore[method-assign]
    reason = _failure(stage(hub, write_job(tmp_path), tmp_path), tmp_path)
    assert reason.startswith("VolumeFull: ")
    assert hub.downloads() == []


def test_local_data_paths_get_the_same_column_check(hub: FakeHub, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "mine.parquet").write_bytes(parquet(drop="data_source"))
    job = write_job(tmp_path, data={"train": str(data / "mine.parquet")})
    reason = _failure(stage(hub, job, tmp_path), tmp_path)
    assert reason.startswith("MissingColumn: ") and "data_source" in reason


# --- issue 18: staging writes only inside the claim's mount -----------------------------------------


@pytest.mark.parametrize("hostile", ["../../escaped.txt", "/abs/escaped.txt", "a/./b", "a\\..\\b", "x\nname"])
def test_a_hostile_name_in_the_hubs_listing_is_refused_with_its_cause(
    hub: FakeHub, tmp_path: Path, hostile: str
) -> None:
    hub.repos[("model", MODEL)].files[hostile] = b"payload"
    result = stage(hub, write_job(tmp_path), tmp_path)
    reason = _failure(result, tmp_path)
    assert reason.startswith("UnsafePath: tiny-org/tiny-model: ")
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "escaped.txt").exists() and not Path("/abs/escaped.txt").exists()
    assert hub.downloads() == []  # refused from the listing, before any download


def test_a_symlink_planted_on_the_claim_is_not_followed_out_of_it(hub: FakeHub, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    models = tmp_path / "models"
    models.mkdir()
    (models / "hf").symlink_to(outside, target_is_directory=True)
    result = stage(hub, write_job(tmp_path), tmp_path)
    reason = _failure(result, tmp_path)
    assert reason.startswith("UnsafePath: hf://tiny-org/tiny-model@main: ")
    assert "Traceback" not in result.stderr
    assert list(outside.iterdir()) == []
