"""Writing Python values into CEL source.

CEL string literals have escape rules of their own (``\\\\``, ``\\'``, ``\\n``, ...; ``\\.`` is not one), so a
regular expression written for Python cannot be pasted between quotes: the API server refuses the whole
CRD with a syntax error. Every literal a rule inlines goes through :func:`cel_string`.
"""

from __future__ import annotations


def cel_string(value: str) -> str:
    """``value`` as a single-quoted CEL string literal that evaluates back to ``value``."""
    escaped = value.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n").replace("\r", "\\r")
    return f"'{escaped}'"
