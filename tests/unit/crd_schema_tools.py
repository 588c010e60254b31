"""What the API server does with the generated CRD schema, re-done in Python for the tests.

``strict_json_schema`` turns the structural schema into a JSON Schema (draft 4, which shares
OpenAPI v3.0's boolean ``exclusiveMinimum``) that rejects unknown fields, like the API server's
strict field validation. ``apply_defaults`` applies ``default`` values top-down the way the API
server defaults custom resources: a defaulted object is itself defaulted field by field.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterator
from typing import Any

import jsonschema

from flashrl_operator.generate.crd import build_crd

_DROPPED = ("description", "default", "nullable")


@functools.cache
def root_schema() -> dict[str, Any]:
    """The generated ``openAPIV3Schema`` (built once per test run; treat it as read-only)."""
    schema: dict[str, Any] = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def spec_schema() -> dict[str, Any]:
    schema: dict[str, Any] = root_schema()["properties"]["spec"]
    return schema


def strict_json_schema(node: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "properties":
            out[key] = {name: strict_json_schema(sub) for name, sub in value.items()}
        elif key == "items":
            out[key] = strict_json_schema(value)
        elif key.startswith("x-kubernetes-") or key in _DROPPED:
            continue
        else:
            out[key] = value
    if node.get("type") == "object" and "properties" in node:
        out["additionalProperties"] = False
    return out


def validator(node: dict[str, Any] | None = None) -> jsonschema.Draft4Validator:
    schema = strict_json_schema(node if node is not None else root_schema())
    jsonschema.Draft4Validator.check_schema(schema)
    return jsonschema.Draft4Validator(schema)


def apply_defaults(node: dict[str, Any], value: Any) -> Any:
    value = copy.deepcopy(value)
    if node.get("type") == "object" and isinstance(value, dict):
        for name, sub in node.get("properties", {}).items():
            if name not in value and "default" in sub:
                value[name] = copy.deepcopy(sub["default"])
            if name in value:
                value[name] = apply_defaults(sub, value[name])
    elif node.get("type") == "array" and isinstance(value, list):
        value = [apply_defaults(node["items"], item) for item in value]
    return value


def error_path(error: jsonschema.ValidationError) -> str:
    """``spec.rollout.samplesPerPrompt`` / ``spec.overrides[0]`` style, as `flashrl validate` prints paths."""
    text = ""
    for part in error.absolute_path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    # An unknown field is reported at its parent; name the field itself, as pydantic does.
    # Unknown and missing fields are reported at their parent; name the field, as pydantic does.
    names: list[str] = []
    if error.validator == "additionalProperties":
        names = sorted(set(error.instance) - set(error.schema.get("properties", {})))
    elif error.validator == "required":
        names = sorted(set(error.schema["required"]) - set(error.instance))
    text += "".join(f".{name}" if text else name for name in names[:1])
    return text


def walk(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node with a readable path (``spec.rollout.samplesPerPrompt``, ``spec.overrides[]``)."""
    yield path, node
    for name, sub in node.get("properties", {}).items():
        yield from walk(sub, f"{path}.{name}" if path else name)
    if "items" in node:
        yield from walk(node["items"], f"{path}[]")
