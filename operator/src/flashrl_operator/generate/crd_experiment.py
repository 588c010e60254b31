"""The FlashRLExperiment CustomResourceDefinition, generated from the ``flashrl_api.experiment`` models.

It reuses the FlashRLJob schema builder (:mod:`flashrl_operator.generate.crd`): ``spec.template`` is exactly a
FlashRLJob spec (same defaults, ranges and CEL rules), and each variant's ``spec`` is the same schema
with every default and required field removed, so the API server checks a variant's field names and
types without filling in values the variant did not set (a default there would override the
template). The rules on the experiment itself come from :mod:`flashrl_api.experiment`, CEL beside
the Python predicate they pair with. Committed to the chart next to the FlashRLJob CRD and guarded
by the same drift test (``make crd``).
"""

from __future__ import annotations

import copy
from typing import Any, Final

from flashrl_api import GROUP
from flashrl_api.experiment import (
    EXPERIMENT_KIND,
    EXPERIMENT_PLURAL,
    EXPERIMENT_SHORT_NAMES,
    EXPERIMENT_SINGULAR,
    OBJECT_RULES,
    SETUP_CHANGES_MESSAGE,
    SPEC_RULES,
    FlashRLExperimentSpec,
    FlashRLExperimentStatus,
    Variant,
    VariantBase,
)
from flashrl_operator.generate._yaml import dump_all
from flashrl_operator.generate.crd import (
    _order,
    _scalar,
    custom_resource_definition,
    describe,
    generated_header,
    kind_root_schema,
    list_map,
    object_schema,
    printer_column,
    spec_schema,
)

EXPERIMENT_CRD_NAME: Final = f"{EXPERIMENT_PLURAL}.{GROUP}"
CHART_EXPERIMENT_CRD_PATH: Final = f"charts/flashrl-operator/files/crds/{EXPERIMENT_CRD_NAME}.yaml"

HEADER: Final = generated_header(EXPERIMENT_CRD_NAME, f"flashrl crd --kind {EXPERIMENT_KIND}")

IMMUTABLE_MESSAGE: Final = (
    "cannot change once the experiment exists (its FlashRLJobs were created from it); delete and recreate "
    "the FlashRLExperiment, or change only spec.parallelism"
)

PRINTER_COLUMNS: Final[tuple[dict[str, Any], ...]] = (
    printer_column("Phase", "string", ".status.phase", "Experiment phase."),
    printer_column("Finished", "string", ".status.finished", "Variants finished out of all."),
    printer_column(
        "Parallelism", "integer", ".spec.parallelism", "Variants running at once (empty: all).", priority=1
    ),
    printer_column("Reason", "string", ".status.reason", "Why the experiment failed or waits.", priority=1),
    printer_column("Age", "date", ".metadata.creationTimestamp"),
)


def _strip_defaults(node: Any, in_items: bool = False) -> Any:
    """A schema with no defaults, and no required fields outside list items (list-map keys must stay
    required, and a list in a partial spec replaces the template's list whole)."""
    if isinstance(node, list):
        return [_strip_defaults(item, in_items) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "default" or (key == "required" and not in_items):
            continue
        if key == "x-kubernetes-validations":
            continue
        if key == "properties":
            out[key] = {name: _strip_defaults(prop, False) for name, prop in value.items()}
        elif key == "items":
            out[key] = _strip_defaults(value, True)
        else:
            out[key] = copy.deepcopy(value)
    return out


def partial_spec_schema() -> dict[str, Any]:
    """A variant's ``spec``: the FlashRLJob spec's fields and types, nothing defaulted or required."""
    schema = _strip_defaults(object_schema(FlashRLExperimentSpec.model_fields["template"].annotation))  # type: ignore[arg-type]
    schema["description"] = describe(Variant.model_fields["spec"].description)
    schema["default"] = {}
    return _order(schema)


def template_schema() -> dict[str, Any]:
    """``spec.template``: a whole FlashRLJob spec with its rules, reported at ``spec.template.*``."""
    schema = copy.deepcopy(spec_schema())
    schema["description"] = describe(FlashRLExperimentSpec.model_fields["template"].description)
    for rule in schema.get("x-kubernetes-validations", []):
        if rule["message"].startswith("spec."):
            rule["message"] = "spec.template." + rule["message"].removeprefix("spec.")
    schema["x-kubernetes-validations"] = [
        *schema.get("x-kubernetes-validations", []),
        {"rule": "self == oldSelf", "message": f"spec.template: {IMMUTABLE_MESSAGE}"},
    ]
    return schema


def variants_schema() -> dict[str, Any]:
    """``spec.variants``: a list-map keyed by name, each item a name, a flag and a partial spec."""
    field = FlashRLExperimentSpec.model_fields["variants"]
    item = object_schema(VariantBase, describe(Variant.__doc__))
    item["properties"]["spec"] = partial_spec_schema()
    return {
        "type": "array",
        "description": describe(field.description),
        "items": item,
        "maxItems": 8,
        "minItems": 2,
        "x-kubernetes-list-map-keys": ["name"],
        "x-kubernetes-list-type": "map",
        "x-kubernetes-validations": [
            {"rule": "self == oldSelf", "message": f"spec.variants: {IMMUTABLE_MESSAGE}"}
        ],
    }


def experiment_spec_schema() -> dict[str, Any]:
    """``spec``: template, variants, replicas, parallelism, and the rules across them."""
    raw = FlashRLExperimentSpec.model_json_schema(by_alias=True, mode="validation")
    parallelism = _scalar(raw["properties"]["parallelism"], raw.get("$defs", {}), "parallelism")
    parallelism["description"] = describe(FlashRLExperimentSpec.model_fields["parallelism"].description)
    replicas = _scalar(raw["properties"]["replicas"], raw.get("$defs", {}), "replicas")
    replicas["description"] = describe(FlashRLExperimentSpec.model_fields["replicas"].description)
    replicas["x-kubernetes-validations"] = [
        {"rule": "self == oldSelf", "message": f"spec.replicas: {IMMUTABLE_MESSAGE}"}
    ]
    return {
        "type": "object",
        "description": describe(FlashRLExperimentSpec.__doc__),
        "default": {},
        "properties": {
            "template": template_schema(),
            "variants": variants_schema(),
            "replicas": _order(replicas),
            "parallelism": _order(parallelism),
        },
        "x-kubernetes-validations": [
            {
                "rule": cel,
                "message": f"spec.{path}: {SETUP_CHANGES_MESSAGE}",
                "fieldPath": f".{path}",
                "reason": "FieldValueInvalid",
            }
            for _, path, cel in SPEC_RULES
        ],
    }


def experiment_status_schema() -> dict[str, Any]:
    """``status``: written only by the operator; conditions keyed by type, variants by name and replica
    (one entry per FlashRLJob: with spec.replicas, a variant has several)."""
    schema = object_schema(FlashRLExperimentStatus)
    list_map(schema["properties"]["conditions"], "type")
    list_map(schema["properties"]["variants"], "name")
    schema["properties"]["variants"]["x-kubernetes-list-map-keys"] = ["name", "replica"]
    return schema


def experiment_root_schema() -> dict[str, Any]:
    """The whole object's ``openAPIV3Schema``, with the rules on its name."""
    return kind_root_schema(
        EXPERIMENT_KIND,
        "FlashRLExperiment runs several FlashRLJobs that differ in one deliberate way (by "
        "default the rollout precision: blockwise FP8, per-channel FP8, BF16) and gathers their status, "
        "for a side-by-side comparison (flashrl report).",
        experiment_spec_schema(),
        experiment_status_schema(),
        [
            {"rule": rule.cel, "message": f"{rule.path}: {rule.message}", "reason": "FieldValueInvalid"}
            for rule in OBJECT_RULES
        ],
    )


def build_experiment_crd() -> dict[str, Any]:
    """The CustomResourceDefinition object (``apiextensions.k8s.io/v1``) for FlashRLExperiment."""
    names = {
        "kind": EXPERIMENT_KIND,
        "plural": EXPERIMENT_PLURAL,
        "singular": EXPERIMENT_SINGULAR,
        "shortNames": EXPERIMENT_SHORT_NAMES,
    }
    return custom_resource_definition(names, PRINTER_COLUMNS, experiment_root_schema())


def experiment_crd_yaml() -> str:
    """The CRD as committed to the chart: a header, then one document."""
    return HEADER + dump_all([build_experiment_crd()])


__all__ = [
    "CHART_EXPERIMENT_CRD_PATH",
    "EXPERIMENT_CRD_NAME",
    "HEADER",
    "PRINTER_COLUMNS",
    "build_experiment_crd",
    "experiment_crd_yaml",
    "partial_spec_schema",
]
