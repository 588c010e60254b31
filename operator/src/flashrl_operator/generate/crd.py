"""The FlashRLJob CustomResourceDefinition, generated from the ``flashrl_api`` models.

The pydantic models are the single source of truth; this module turns them into the structural
OpenAPI v3 schema the API server enforces (types, ranges, enums, patterns, defaults, descriptions)
and turns :data:`flashrl_api.RULES` into CEL ``x-kubernetes-validations``. Because the CRD is derived
rather than written, ``kubectl apply`` rejects the same manifests ``flashrl validate`` rejects and
fills in the same defaults the operator assumes. The output is deterministic so the committed copy
in the Helm chart can be checked for drift (``make crd`` regenerates it).
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Mapping
from typing import Any, Final

from pydantic import BaseModel, TypeAdapter
from pydantic.fields import FieldInfo

from flashrl_api import (
    API_VERSION,
    GROUP,
    KIND,
    PLURAL,
    RULES,
    SHORT_NAMES,
    SINGULAR,
    VERSION,
    FlashRLJobSpec,
    FlashRLJobStatus,
)
from flashrl_api._base import NO_NUL_PATTERN
from flashrl_api.manifest import NAME_CEL, NAME_MESSAGE
from flashrl_api.rules import IMMUTABLE_CEL, IMMUTABLE_MESSAGE, immutable_spec_fields
from flashrl_operator.generate._yaml import dump_all
from flashrl_operator.vocab import kuberay

CRD_NAME: Final = f"{PLURAL}.{GROUP}"
CATEGORIES: Final = ("flashrl",)
#: Where the Helm chart keeps the committed, generated copy (relative to the repository root).
CHART_CRD_PATH: Final = f"charts/flashrl-operator/files/crds/{CRD_NAME}.yaml"


def generated_header(crd_name: str, command: str) -> str:
    """The comment on top of a committed CRD: what generated it and that it is not edited by hand."""
    return (
        f"# {crd_name}: generated from the flashrl_api models by `{command}` (`make crd`).\n"
        "# Do not edit by hand: change the models in jobs/src/flashrl_api and regenerate.\n"
    )


HEADER: Final = generated_header(CRD_NAME, "flashrl crd")

#: JSON-schema keywords carried over unchanged; everything else pydantic emits (title,
#: additionalProperties, $defs, ...) is dropped or rewritten into the structural form.
_KEPT_KEYWORDS: Final = (
    "minimum",
    "maximum",
    "pattern",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "maxProperties",
)


def printer_column(
    name: str, kind: str, json_path: str, description: str = "", priority: int = 0
) -> dict[str, Any]:
    """One ``kubectl get`` column; ``priority=1`` shows it only with ``-o wide``."""
    column: dict[str, Any] = {"name": name, "type": kind, "jsonPath": json_path}
    if description:
        column["description"] = description
    if priority:
        column["priority"] = priority
    return column


PRINTER_COLUMNS: Final[tuple[dict[str, Any], ...]] = (
    printer_column("Phase", "string", ".status.phase", "Lifecycle phase."),
    printer_column("Step", "integer", ".status.progress.step", "Last completed training step."),
    printer_column("Steps", "integer", ".status.progress.totalSteps", "Steps the job will run."),
    printer_column(
        "Checkpoint",
        "integer",
        ".status.checkpoint.step",
        "Step of the newest checkpoint (where a retry resumes).",
    ),
    printer_column(
        "Val-Score",
        "number",
        ".status.validationScore.value",
        "Newest validation score (verl val-core/<source>/<var>/mean@N).",
    ),
    printer_column(
        "Mismatch-KL",
        "number",
        '.status.metrics[?(@.name=="rollout_corr/kl")].value',
        "Newest rollout/trainer mismatch (verl rollout_corr/kl).",
        priority=1,
    ),
    printer_column(
        "Quantization",
        "string",
        ".status.quantization",
        "Rollout weight precision now in use (bf16 after the mismatch guard's FallbackToBF16).",
    ),
    printer_column(
        "KV-Cache",
        "string",
        ".status.kvCache",
        "Rollout KV-cache precision now in use (spec.rollout.kvCache; bf16 after FallbackToBF16).",
    ),
    printer_column(
        "Nodes",
        "integer",
        ".spec.resources.nodes",
        "GPU worker pods (resources.gpusPerNode GPUs each).",
        priority=1,
    ),
    printer_column(
        "Attempt",
        "integer",
        ".status.attempt",
        "Current attempt (Ray cluster); each retry is a new one.",
        priority=1,
    ),
    printer_column(
        "Goodput",
        "number",
        ".status.goodput.productiveFraction",
        "Share of the held GPU-seconds that trained the model (status.goodput).",
        priority=1,
    ),
    printer_column("Reason", "string", ".status.reason", "Why the job failed or is waiting.", priority=1),
    printer_column(
        kuberay.RAY_JOB.kind,
        "string",
        ".status.rayJobName",
        "The KubeRay RayJob running this job.",
        priority=1,
    ),
    printer_column("Age", "date", ".metadata.creationTimestamp"),
)


class CrdGenerationError(ValueError):
    """The models use a construct that has no structural-schema equivalent."""


def describe(text: str | None) -> str:
    """Normalise a docstring for ``kubectl explain``: one line per paragraph, single backticks."""
    if not text:
        return ""
    paragraphs = re.split(r"\n\s*\n", text.strip())
    joined = "\n\n".join(" ".join(line.strip() for line in p.splitlines()) for p in paragraphs)
    return joined.replace("``", "`")


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    """The model class inside ``M``, ``M | None`` or ``list[M]`` (None for scalars)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _nested_model(arg)
        if found is not None:
            return found
    return None


def _is_optional(annotation: Any) -> bool:
    origin = typing.get_origin(annotation)
    return origin in (typing.Union, types.UnionType) and type(None) in typing.get_args(annotation)


def _field_default(field: FieldInfo) -> tuple[bool, Any]:
    """``(has_default, wire_value)``; nested models give only what differs from their own defaults.

    A nested object's default is usually ``{}``: the API server then defaults each of its fields,
    so omitting a whole section yields the same object as the pydantic model does. Sections whose
    default differs from their class defaults (e.g. the data volume's mount path) carry just the
    difference.
    """
    if field.is_required():
        return False, None
    value = field.get_default(call_default_factory=True, validated_data={})
    if value is None:
        return False, None
    if isinstance(value, BaseModel):
        return True, value.model_dump(mode="json", by_alias=True, exclude_defaults=True, exclude_none=True)
    return True, TypeAdapter[Any](field.annotation or Any).dump_python(value, mode="json", by_alias=True)


def _resolve(node: Mapping[str, Any], defs: Mapping[str, Any]) -> dict[str, Any]:
    """Inline ``$ref`` and collapse ``X | None`` to ``X``, keeping the outer keys (description...)."""
    node = dict(node)
    if "$ref" in node:
        target = defs[str(node.pop("$ref")).rsplit("/", 1)[-1]]
        node = {**target, **node}
    if "anyOf" in node:
        branches = [b for b in node.pop("anyOf") if b != {"type": "null"}]
        if len(branches) != 1:
            raise CrdGenerationError(f"unions are not structural: {branches}")
        inner = _resolve(branches[0], defs)
        node = {**inner, **{k: v for k, v in node.items() if k != "default" or v is not None}}
    if node.get("default", 0) is None:
        del node["default"]
    return node


def _scalar(node: Mapping[str, Any], defs: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Convert a non-model JSON-schema node (scalar or list) into the structural form."""
    node = _resolve(node, defs)
    out: dict[str, Any] = {}
    if "const" in node:
        out["type"] = node.get("type") or _json_type(node["const"], where)
        out["enum"] = [node["const"]]
    elif "enum" in node:
        out["type"] = node.get("type") or _json_type(node["enum"][0], where)
        out["enum"] = list(node["enum"])
    elif "type" in node:
        out["type"] = node["type"]
    else:
        raise CrdGenerationError(f"{where}: no type in {node}")
    if isinstance(out["type"], list):
        raise CrdGenerationError(f"{where}: several types {out['type']} are not structural")
    if node.get("description"):
        out["description"] = describe(node["description"])
    for key in _KEPT_KEYWORDS:
        if key in node:
            out[key] = node[key]
    # OpenAPI v3.0 (which Kubernetes speaks) writes exclusive bounds as booleans next to the bound.
    for exclusive, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if exclusive in node:
            out[bound] = node[exclusive]
            out[exclusive] = True
    if out["type"] == "string" and "enum" not in out and "pattern" not in out:
        # No NUL in a string that may reach a path, an argument or the environment (the models refuse
        # it too: flashrl_api._base). A pattern costs nothing of the CEL budget; strings with a pattern
        # of their own already admit only the characters it lists.
        out["pattern"] = NO_NUL_PATTERN
    if out["type"] == "object":
        # A string map (e.g. a node selector): structural only with its value schema.
        values = node.get("additionalProperties")
        if not isinstance(values, Mapping):
            raise CrdGenerationError(f"{where}: an object that is not a model needs typed values")
        out["additionalProperties"] = _scalar(values, defs, f"{where}{{}}")
    if out["type"] == "array":
        items = node.get("items")
        if items is None:
            raise CrdGenerationError(f"{where}: array without items")
        out["items"] = _scalar(items, defs, f"{where}[]")
    return out


def _json_type(value: Any, where: str) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    raise CrdGenerationError(f"{where}: cannot type {value!r}")


def _order(node: dict[str, Any]) -> dict[str, Any]:
    """A fixed, readable key order: type and description first, then the constraints."""
    first = (
        "type",
        "description",
        "default",
        "enum",
        "minimum",
        "exclusiveMinimum",
        "maximum",
        "exclusiveMaximum",
    )
    ordered = {k: node[k] for k in first if k in node}
    ordered.update({k: node[k] for k in sorted(node) if k not in ordered})
    return ordered


def object_schema(model: type[BaseModel], description: str | None = None) -> dict[str, Any]:
    """The structural schema of one model: its fields in declaration order, with defaults."""
    full = model.model_json_schema(by_alias=True, mode="validation")
    defs = full.get("$defs", {})
    properties: dict[str, Any] = {}
    required: list[str] = []
    for name, field in model.model_fields.items():
        alias = field.alias or name
        raw = full["properties"][alias]
        nested = _nested_model(field.annotation)
        field_doc = describe(field.description)
        if nested is None:
            prop = _scalar(raw, defs, alias)
            if field_doc:
                prop["description"] = field_doc
        elif typing.get_origin(_strip_optional(field.annotation)) is list:
            prop = _list_of_models(raw, defs, nested, field_doc)
        else:
            prop = object_schema(nested, _section_doc(field_doc, nested))
        has_default, default = _field_default(field)
        if has_default:
            prop["default"] = default
        elif field.is_required():
            required.append(alias)
        properties[alias] = _order(prop)
    out: dict[str, Any] = {
        "type": "object",
        "description": description if description is not None else describe(model.__doc__),
        "properties": properties,
    }
    if required:
        out["required"] = required
    return out


def _section_doc(field_doc: str, model: type[BaseModel]) -> str:
    """A nested object's description: its class docstring says what the section is.

    The class docstring is the fuller text, so it wins; a class used by several fields (the three
    volumes) is prefixed by the field's own docstring, which tells the uses apart.
    """
    class_doc = describe(model.__doc__)
    if not class_doc:
        return field_doc
    if _SHARED_MODELS.get(model, 0) > 1 and field_doc:
        return f"{field_doc} {class_doc}"
    return class_doc


def _count_models(model: type[BaseModel], counts: dict[type[BaseModel], int]) -> dict[type[BaseModel], int]:
    for field in model.model_fields.values():
        nested = _nested_model(field.annotation)
        if nested is not None:
            counts[nested] = counts.get(nested, 0) + 1
            _count_models(nested, counts)
    return counts


def _strip_optional(annotation: Any) -> Any:
    if _is_optional(annotation):
        (inner,) = [a for a in typing.get_args(annotation) if a is not type(None)]
        return inner
    return annotation


def _list_of_models(
    raw: Mapping[str, Any], defs: Mapping[str, Any], item_model: type[BaseModel], doc: str
) -> dict[str, Any]:
    """An array of objects: the item schema comes from the model, the list bounds from the field."""
    node = _resolve(raw, defs)
    out: dict[str, Any] = {"type": "array", "description": doc, "items": object_schema(item_model)}
    for key in ("minItems", "maxItems"):
        if key in node:
            out[key] = node[key]
    # A list-map (items keyed by a field) is declared on the field itself.
    out.update({k: v for k, v in node.items() if k.startswith("x-kubernetes-list-")})
    return out


#: How many fields use each nested model (a shared class needs its field's text to be told apart).
_SHARED_MODELS: Final = _count_models(FlashRLJobSpec, _count_models(FlashRLJobStatus, {}))


def spec_validations() -> list[dict[str, str]]:
    """Every cross-field rule as a CEL validation on ``spec``, reported at the field it is about."""
    return [
        {
            "rule": rule.cel,
            "message": f"spec.{rule.path}: {rule.message}",
            "fieldPath": f".{rule.path}",
            "reason": "FieldValueInvalid",
        }
        for rule in RULES
    ]


def add_transition_rules(schema: dict[str, Any]) -> None:
    """``self == oldSelf`` on every immutable field of ``spec`` (``flashrl_api.rules.immutable_spec_fields``).

    The API server then refuses an update that changes one at once (``kubectl apply`` fails with the
    field path), instead of the operator reporting ImmutableFieldChanged afterwards; the operator keeps
    its own check for clusters without CEL. Rules sit on the fields themselves (cardinality 1), not on
    ``spec``, so each message names its field, and the lifecycle knobs KubeRay honours on a live RayJob
    stay editable. Every field has a default, so old and new objects always carry it and the rule
    always runs.
    """
    for path in immutable_spec_fields():
        node = schema
        for part in path.split("."):
            node = node["properties"][part]
        node.setdefault("x-kubernetes-validations", []).append(
            {
                "rule": IMMUTABLE_CEL,
                "message": f"spec.{path}: {IMMUTABLE_MESSAGE}",
                "reason": "FieldValueForbidden",
            }
        )


def complete_default(model: type[BaseModel]) -> dict[str, Any]:
    """Every field's default, nested sections included: the default of a section that rules read.

    The API server checks a default against the schema's CEL rules as it stands, without defaulting
    inside it first, so ``spec: {}`` as the default of ``spec`` fails every rule that reads
    ``self.training...`` (``no such key``) and the whole CRD is refused. The complete object is what
    defaulting an empty ``spec`` yields anyway; optional fields stay absent, and the rules guard them
    with ``has()``.
    """
    return model().model_dump(mode="json", by_alias=True, exclude_none=True)


def spec_schema() -> dict[str, Any]:
    """``spec``: the FlashRLJobSpec schema, defaulted as a whole, with the cross-field rules and the
    immutable fields' transition rules."""
    schema = object_schema(FlashRLJobSpec)
    schema["default"] = complete_default(FlashRLJobSpec)
    schema["x-kubernetes-validations"] = spec_validations()
    add_transition_rules(schema)
    return _order(schema)


def list_map(schema: dict[str, Any], key: str) -> None:
    """Make an array schema a map keyed by ``key`` (server-side apply merges its items by key)."""
    schema["x-kubernetes-list-type"] = "map"
    schema["x-kubernetes-list-map-keys"] = [key]


def status_schema() -> dict[str, Any]:
    """``status``: written only by the operator; conditions are a map keyed by type."""
    schema = object_schema(FlashRLJobStatus)
    list_map(schema["properties"]["conditions"], "type")
    return schema


def kind_root_schema(
    kind: str,
    description: str,
    spec: dict[str, Any],
    status: dict[str, Any],
    validations: list[dict[str, str]],
) -> dict[str, Any]:
    """The ``openAPIV3Schema`` of a ``flashrl.dev`` kind: apiVersion, kind, metadata, its spec and
    status, and the rules on the whole object."""
    return {
        "type": "object",
        "description": description,
        "properties": {
            "apiVersion": {
                "type": "string",
                "description": "Versioned schema of this representation of an object; "
                f"{API_VERSION} for a {kind}.",
            },
            "kind": {
                "type": "string",
                "description": f"REST resource this object represents; {kind}.",
            },
            # Only the type: the API server refuses any other keyword on metadata (it defines it itself).
            "metadata": {"type": "object"},
            "spec": spec,
            "status": status,
        },
        "x-kubernetes-validations": validations,
    }


def root_schema() -> dict[str, Any]:
    """The whole object's ``openAPIV3Schema``."""
    return kind_root_schema(
        KIND,
        "FlashRLJob runs FP8-rollout RL post-training of an LLM (verl trainer, SGLang "
        "rollouts, truncated importance sampling) on a KubeRay cluster of GPU nodes.",
        spec_schema(),
        status_schema(),
        # Kubernetes allows custom-resource names of up to 253 characters; a FlashRLJob's name becomes
        # the RayJob's, its pods' and their labels' (parse_job checks the same, for clusters without CEL).
        [{"rule": NAME_CEL, "message": f"metadata.name: {NAME_MESSAGE}", "reason": "FieldValueInvalid"}],
    )


def custom_resource_definition(
    names: Mapping[str, Any],
    printer_columns: tuple[dict[str, Any], ...],
    root: dict[str, Any],
) -> dict[str, Any]:
    """The CustomResourceDefinition (``apiextensions.k8s.io/v1``) of a namespaced ``flashrl.dev`` kind
    with a status subresource, one served and stored version; ``names`` as ``kind``, ``plural``,
    ``singular`` and ``shortNames`` (``listKind`` and the categories are added)."""
    kind, plural = names["kind"], names["plural"]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{GROUP}",
            "labels": {"app.kubernetes.io/name": "flashrl-operator", "app.kubernetes.io/part-of": "flashrl"},
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": names["singular"],
                "shortNames": list(names["shortNames"]),
                "categories": list(CATEGORIES),
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [dict(c) for c in printer_columns],
                    "schema": {"openAPIV3Schema": root},
                }
            ],
        },
    }


def build_crd() -> dict[str, Any]:
    """The CustomResourceDefinition object (``apiextensions.k8s.io/v1``) for FlashRLJob."""
    names = {"kind": KIND, "plural": PLURAL, "singular": SINGULAR, "shortNames": SHORT_NAMES}
    return custom_resource_definition(names, PRINTER_COLUMNS, root_schema())


def crd_yaml() -> str:
    """The CRD as the YAML text committed to the chart: a header, then one document."""
    return HEADER + dump_all([build_crd()])
