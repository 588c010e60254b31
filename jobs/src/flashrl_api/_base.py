"""The base class every API model derives from.

The wire format is Kubernetes-style camelCase; Python code uses snake_case. Unknown fields are
rejected (``extra="forbid"``) so a typo such as ``promptBatchsize`` is an error naming the path,
not a silently ignored setting.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class ApiModel(BaseModel):
    """A strict, camelCase-on-the-wire, immutable model."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        validate_default=True,
        use_attribute_docstrings=True,
    )

    def to_wire(self) -> dict[str, Any]:
        """Return the object as it appears in Kubernetes: camelCase keys, defaults filled in."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)
