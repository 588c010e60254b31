"""The FlashRLJob API (``flashrl.dev/v1alpha1``): typed models, rules and manifest parsing.

This package is the single source of truth shared by the operator (which renders and reports) and
the in-pod launcher (which runs verl). It depends on pydantic and PyYAML only.
"""

from flashrl_api.manifest import (
    API_VERSION,
    GROUP,
    KIND,
    PLURAL,
    SHORT_NAMES,
    SINGULAR,
    VERSION,
    FlashRLJob,
    Problem,
    SpecError,
    load_documents,
    load_job_file,
    parse_job,
    parse_spec,
    spec_problems,
)
from flashrl_api.rules import RULES, Rule, spec_warnings, violations
from flashrl_api.spec import FlashRLJobSpec
from flashrl_api.status import PHASES, TERMINAL_PHASES, Condition, FlashRLJobStatus, Phase, Progress

__all__ = [
    "API_VERSION",
    "GROUP",
    "KIND",
    "PHASES",
    "PLURAL",
    "RULES",
    "SHORT_NAMES",
    "SINGULAR",
    "TERMINAL_PHASES",
    "VERSION",
    "Condition",
    "FlashRLJob",
    "FlashRLJobSpec",
    "FlashRLJobStatus",
    "Phase",
    "Problem",
    "Progress",
    "Rule",
    "SpecError",
    "load_documents",
    "load_job_file",
    "parse_job",
    "parse_spec",
    "spec_problems",
    "spec_warnings",
    "violations",
]
