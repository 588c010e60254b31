"""ownerReferences are read in one place (vocab/owners.py), and every owner question goes through it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import flashrl_operator
from flashrl_operator.experiment.plan import controlled_by, name_taken
from flashrl_operator.experiment.reconciler import experiment_of
from flashrl_operator.render.children import owner_name, ownership_conflict
from flashrl_operator.vocab.owners import (
    controller_name,
    controller_of,
    describe_controller,
    is_controlled_by,
    is_referenced_by,
    owner_references,
    owner_uids,
)

PACKAGE = Path(flashrl_operator.__file__).parent
#: Reading the field: ``.get("ownerReferences")``, ``["ownerReferences"]`` not followed by ``=``.
READS = re.compile(r"""\.get\(\s*["']ownerReferences["']|\[\s*["']ownerReferences["']\s*\](?!\s*=[^=])""")


def _obj(*refs: Any, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "o", "ownerReferences": list(refs), "labels": labels or {}}}


def _ref(kind: str, name: str, uid: str, controller: bool | None = True) -> dict[str, Any]:
    ref: dict[str, Any] = {"apiVersion": "flashrl.dev/v1alpha1", "kind": kind, "name": name, "uid": uid}
    if controller is not None:
        ref["controller"] = controller
    return ref


def test_only_vocab_owners_reads_owner_references() -> None:
    readers = [
        str(path.relative_to(PACKAGE))
        for path in sorted(PACKAGE.rglob("*.py"))
        if READS.search(path.read_text())
    ]
    assert readers == ["vocab/owners.py"]


def test_the_controller_is_the_reference_marked_controller() -> None:
    plain = _ref("FlashRLJob", "a", "u1", controller=None)
    ctrl = _ref("FlashRLExperiment", "x", "u2")
    obj = _obj("not a mapping", plain, ctrl)
    assert owner_references(obj) == [plain, ctrl]
    assert controller_of(obj) == ctrl
    assert controller_of(_obj(plain)) is None
    # "controller": "true" (a string) is not a controller reference.
    assert controller_of(_obj({**ctrl, "controller": "true"})) is None
    assert controller_of({"metadata": {"ownerReferences": "junk"}}) is None
    assert owner_uids(obj) == {"u1", "u2"}


def test_is_controlled_by_needs_the_uid_and_the_kind() -> None:
    obj = _obj(_ref("FlashRLExperiment", "x", "u2"))
    assert is_controlled_by(obj, "u2")
    assert is_controlled_by(obj, "u2", "FlashRLExperiment")
    assert not is_controlled_by(obj, "u2", "FlashRLJob")
    assert not is_controlled_by(obj, "other")
    assert not is_controlled_by(obj, None)
    assert not is_controlled_by(_obj(_ref("FlashRLExperiment", "x", "u2", controller=False)), "u2")
    assert controller_name(obj, "FlashRLExperiment") == "x"
    assert controller_name(obj, "FlashRLJob") is None
    assert is_referenced_by(_obj(_ref("FlashRLJob", "a", "u1", controller=None)), "u1", "FlashRLJob")
    assert not is_referenced_by(_obj(_ref("FlashRLJob", "a", "u1")), "u9", "FlashRLJob")


def test_messages_name_the_controller() -> None:
    assert describe_controller(_obj()) == "it has no controller"
    assert (
        describe_controller(_obj(_ref("FlashRLJob", "a", "u1"))) == "its controller is FlashRLJob a (uid u1)"
    )


def test_the_callers_agree_with_the_helper() -> None:
    job = _obj(_ref("FlashRLJob", "a", "u1"), labels={"flashrl.dev/job": "b"})
    assert owner_name(job, "FlashRLJob", "flashrl.dev/job") == "a"
    assert owner_name(_obj(labels={"flashrl.dev/job": "b"}), "FlashRLJob", "flashrl.dev/job") == "b"
    assert ownership_conflict("ConfigMap ns/c", job, "u1") is None
    assert ownership_conflict("ConfigMap ns/c", job, "u2") == (
        "ConfigMap ns/c already exists and is not this job's (its controller is FlashRLJob a (uid u1))"
    )
    variant = _obj(_ref("FlashRLExperiment", "x", "u2"))
    assert controlled_by(variant, "u2") and not controlled_by(variant, "u3") and not controlled_by(job, "u1")
    assert experiment_of(variant) == "x" and experiment_of(job) is None
    assert "its controller is FlashRLExperiment x (uid u2)" in name_taken("x-bf16", variant)
    assert "it has no controller" in name_taken("x-bf16", _obj())
