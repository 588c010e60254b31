"""Deterministic, valid and collision-resistant child names."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from flashrl_api import parse_job
from flashrl_operator.render import child_names
from flashrl_operator.render.names import (
    MAX_RAY_JOB_NAME,
    derived_name,
    is_dns1035_label,
    label_value,
    ray_job_name,
    short_hash,
)

DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS_1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

LONG_A = "qwen3-8b-dapo-fp8-blockwise-tis-cap2-h20-node-pool-a-run-0001"
LONG_B = "qwen3-8b-dapo-fp8-blockwise-tis-cap2-h20-node-pool-a-run-0002"


@pytest.mark.parametrize("name", ["a", "qwen3-8b-dapo-fp8", "x" * MAX_RAY_JOB_NAME])
def test_short_valid_names_are_kept(name: str) -> None:
    assert ray_job_name(name) == name


@pytest.mark.parametrize(
    "name",
    [
        "x" * (MAX_RAY_JOB_NAME + 1),
        "a" * 63,
        LONG_A,
        "a" + "-" * 60 + "b",  # A cut inside the run of dashes must not end the name with '-'.
        "0-starts-with-a-digit",
        "UPPER_case.and.dots",
        "-",
    ],
)
def test_ray_job_name_is_a_short_dns1035_label(name: str) -> None:
    short = ray_job_name(name)
    assert len(short) <= MAX_RAY_JOB_NAME == 47
    assert DNS_1035.match(short), short
    assert is_dns1035_label(short, 47)
    assert short.endswith(short_hash(name))


def test_shortened_names_are_stable_and_distinct() -> None:
    assert ray_job_name(LONG_A) == ray_job_name(LONG_A)
    assert ray_job_name(LONG_A) != ray_job_name(LONG_B)
    # Readable: the start of the original survives.
    assert ray_job_name(LONG_A).startswith("qwen3-8b-dapo-fp8")


def test_hash_is_stable_across_processes() -> None:
    # sha256, not Python's salted hash(): another interpreter computes the same name.
    code = f"from flashrl_operator.render.names import ray_job_name; print(ray_job_name({LONG_A!r}))"
    other = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert other.stdout.strip() == ray_job_name(LONG_A)


@pytest.mark.parametrize("name", ["a", "a" * 63, LONG_A])
def test_derived_names_keep_their_suffix(name: str) -> None:
    for suffix in ("spec", "launcher"):
        derived = derived_name(name, suffix)
        assert derived == f"{name}-{suffix}"
        assert len(derived) <= 253
        assert DNS_1123_SUBDOMAIN.match(derived)


def test_derived_names_are_hashed_when_invalid() -> None:
    for name in ("Has_Upper", "x" * 260):
        derived = derived_name(name, "spec")
        assert derived.endswith(f"-{short_hash(name)}-spec")
        assert len(derived) <= 253
        assert DNS_1123_SUBDOMAIN.match(derived), derived
    assert derived_name("x" * 260, "spec") != derived_name("x" * 259, "spec")


@pytest.mark.parametrize("value", ["a", "a" * 63, "a" * 64, "a" * 200, "-leading", "has space", "ok.value_1"])
def test_label_values_are_valid(value: str) -> None:
    out = label_value(value)
    assert len(out) <= 63
    assert LABEL_VALUE.match(out), out
    if len(value) <= 63 and LABEL_VALUE.match(value):
        assert out == value
    else:
        assert out.endswith(short_hash(value))


def test_child_names_of_a_long_job() -> None:
    name = "a" * 63  # The longest FlashRLJob name the API accepts.
    job = parse_job({"apiVersion": "flashrl.dev/v1alpha1", "kind": "FlashRLJob", "metadata": {"name": name}})
    names = child_names(job)
    assert len(names.ray_job) <= 47
    assert names.config_map == f"{name}-spec"
    assert names.service_account == names.role == names.role_binding == f"{name}-launcher"
