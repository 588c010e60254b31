"""Reading YAML as kubectl and helm do, so ``flashrl validate`` judges what the API server will see.

kubectl and helm decode YAML with sigs.k8s.io/yaml, a YAML 1.1 decoder: besides yes/no/on/off/true/false
(which PyYAML also reads as booleans) it reads the plain scalars ``y``, ``Y``, ``n`` and ``N`` as booleans,
and then turns a boolean map key into the JSON key ``"true"`` or ``"false"``. A file that PyYAML reads as
``rollout: {n: 8}`` therefore reaches the API server as ``rollout: {"false": 8}``. :class:`KubectlLoader`
resolves scalars the same way and stringifies boolean keys the same way, so the operator's checks and
the server refuse the same document at the same path; :data:`BOOLEAN_KEY_HINT` says why and what to do.

Written here because no maintained Python library reads YAML with Go's YAML 1.1 rules; it is PyYAML's
own SafeLoader with one resolver and one mapping rule changed.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

try:  # libyaml's scanner and parser when present: far faster on large input, same results.
    _Base: type[yaml.SafeLoader] = yaml.CSafeLoader  # type: ignore[attr-defined,assignment,unused-ignore]
except AttributeError:  # pragma: no cover - PyYAML built without libyaml
    _Base = yaml.SafeLoader

#: Every spelling of a boolean in YAML 1.1 as Go's decoders read it.
BOOLEAN_WORDS = frozenset(
    [
        "y",
        "Y",
        "yes",
        "Yes",
        "YES",
        "n",
        "N",
        "no",
        "No",
        "NO",
        "true",
        "True",
        "TRUE",
        "false",
        "False",
        "FALSE",
        "on",
        "On",
        "ON",
        "off",
        "Off",
        "OFF",
    ]
)
_TRUE_WORDS = frozenset({"y", "yes", "true", "on"})
_BOOLEAN_RE = re.compile("^(?:" + "|".join(sorted(BOOLEAN_WORDS)) + ")$")

BOOLEAN_KEY_HINT = (
    "YAML 1.1, as kubectl and helm read files, turns an unquoted key y, n, yes, no, on or off (any case) "
    "into the boolean true or false, so the API server sees the key as 'true' or 'false': write the "
    "field's name as the CRD spells it (quote a key that must stay literal)"
)


class KubectlLoader(_Base):  # type: ignore[misc,valid-type,unused-ignore]
    """A safe loader resolving plain scalars and map keys as kubectl's decoder does."""


def _construct_bool(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> bool:
    return str(loader.construct_scalar(node)).lower() in _TRUE_WORDS


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    """A mapping whose boolean keys become ``"true"``/``"false"``, as JSON needs and kubectl sends."""
    mapping = loader.construct_mapping(node)
    if not any(isinstance(key, bool) for key in mapping):
        return mapping
    return {(str(key).lower() if isinstance(key, bool) else key): value for key, value in mapping.items()}


def _construct_timestamp(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> str:
    """A date or time stays the string it was: Go's decoder makes no time out of an untyped value."""
    return str(loader.construct_scalar(node))


KubectlLoader.add_implicit_resolver("tag:yaml.org,2002:bool", _BOOLEAN_RE, list("yYnNtTfFoO"))
KubectlLoader.add_constructor("tag:yaml.org,2002:bool", _construct_bool)
KubectlLoader.add_constructor("tag:yaml.org,2002:timestamp", _construct_timestamp)
KubectlLoader.add_constructor("tag:yaml.org,2002:map", _construct_mapping)


def load_all(text: str) -> list[Any]:
    """Every document of a YAML stream, read as kubectl reads it."""
    return list(yaml.load_all(text, Loader=KubectlLoader))


def is_boolean_word(key: str) -> bool:
    """Whether kubectl would read ``key``, written plain, as a boolean."""
    return key in BOOLEAN_WORDS
