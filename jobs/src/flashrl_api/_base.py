"""The base class every API model derives from.

The wire format is Kubernetes-style camelCase; Python code uses snake_case. Unknown fields are
rejected (``extra="forbid"``) so a typo such as ``promptBatchsize`` is an error naming the path,
not a silently ignored setting.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator
from pydantic.alias_generators import to_camel

#: What the generated CRD's strings match where they have no pattern of their own: no NUL.
NO_NUL_PATTERN = "^[^\\x00]*$"


def _nul_free(value: Any, depth: int = 0) -> bool:
    if isinstance(value, str):
        return "\x00" not in value
    if depth > 8:
        return True
    if isinstance(value, list | tuple):
        return all(_nul_free(item, depth + 1) for item in value)
    if isinstance(value, dict):
        return all(_nul_free(k, depth + 1) and _nul_free(v, depth + 1) for k, v in value.items())
    return True  # a nested model checked its own fields


class ApiModel(BaseModel):
    """A strict, camelCase-on-the-wire, immutable model."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        validate_default=True,
        use_attribute_docstrings=True,
        # JSON (and so the API server) has no Infinity or NaN: YAML's .inf is refused here, not
        # rendered into an object nothing downstream can read.
        allow_inf_nan=False,
    )

    @field_validator("*", mode="after")
    @classmethod
    def _no_nul(cls, value: Any) -> Any:
        """No NUL in any string: every one may reach a path, an argument or the environment, where a NUL
        ends the string early or fails the launcher after the GPUs are granted (the CRD's strings refuse
        it too, :data:`NO_NUL_PATTERN`)."""
        if not _nul_free(value):
            raise ValueError("must not contain NUL (\\0)")
        return value

    def to_wire(self) -> dict[str, Any]:
        """Return the object as it appears in Kubernetes: camelCase keys, defaults filled in."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


#: Longest part of a user's value quoted back in an error message.
QUOTE_LENGTH = 64


def quote(value: Any, limit: int = QUOTE_LENGTH) -> str:
    """``repr(value)`` for an error message, cut to ``limit`` characters with the full size said.

    Error messages go to terminals, logs and the FlashRLJob's status: a 50 MB value must not be echoed
    back whole, and a container is described by its type and size rather than its contents.
    """
    if isinstance(value, str):
        if len(value) <= limit:
            return repr(value)
        return f"{value[:limit]!r}... ({len(value)} characters)"
    if isinstance(value, bytes):
        return f"{len(value)} bytes"
    if isinstance(value, dict | list | tuple | set):
        return f"a {type(value).__name__} of {len(value)} item{'s' if len(value) != 1 else ''}"
    try:
        text = repr(value)
    except ValueError:  # an int beyond Python's digit limit for str()
        return f"a very large {type(value).__name__}"
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"
