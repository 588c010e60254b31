"""The launcher failure table is the one source: exit codes, reasons, retry policy, CRD text and docs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from flashrl_api.status import (
    LAUNCHER_FAILURES,
    FlashRLJobStatus,
    LauncherExit,
    Reason,
    Severity,
    exit_codes,
    reasons_by_exit_code,
)
from flashrl_jobs import contract
from flashrl_jobs.termination import LaunchError
from flashrl_operator.job import retry_policy
from flashrl_operator.job.retry_policy import NON_RETRYABLE, AttemptEnd, decide, non_retryable
from flashrl_operator.job.status import launcher_failure
from flashrl_operator.job.status.launcher_failure import launcher_failure as read_failure
from flashrl_operator.vocab.kuberay import entrypoint_failed_message

ROOT = Path(__file__).resolve().parents[3]
OPERATOR_DOC = ROOT / "docs" / "operator.md"
LAUNCHER_DOC = ROOT / "docs" / "launcher.md"

#: A row the table does not have: a reason that exists but is not a launcher failure, on a free code.
NEW_ROW = LauncherExit(77, Reason.RAY_JOB_DELETED, False, Severity.USER, "a new way to fail")


def _doc_rows(path: Path, header: str) -> list[list[str]]:
    """The cells of the markdown table whose header row starts with ``header``."""
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def test_the_operator_docs_table_is_the_launcher_failure_table() -> None:
    documented = {
        (cells[0], cells[1].strip("`"), cells[2], cells[3])
        for cells in _doc_rows(OPERATOR_DOC, "| exit code | reason | retried | severity |")
    }
    table = {
        (
            "verl's" if row.exit_code is None else str(row.exit_code),
            str(row.reason),
            "yes" if row.retryable else "no",
            str(row.severity),
        )
        for row in LAUNCHER_FAILURES
    }
    assert documented == table


def test_the_retry_table_in_the_docs_agrees_with_the_retryable_column() -> None:
    rows = _doc_rows(OPERATOR_DOC, "| how the attempt ended (reason) | retried? |")
    for failure in LAUNCHER_FAILURES:
        said = [cells[1] for cells in rows if f"`{failure.reason}`" in cells[0]]
        assert len(said) == 1, f"{failure.reason} is in {len(said)} rows of the retry table"
        assert said[0].startswith("yes" if failure.retryable else "no"), (failure.reason, said[0])


def test_the_operator_docs_name_every_reason() -> None:
    text = OPERATOR_DOC.read_text()
    missing = [reason.value for reason in Reason if f"`{reason.value}`" not in text]
    assert missing == [], f"docs/operator.md does not mention {missing}"
    assert all(f"`{row.reason}`" in text for row in LAUNCHER_FAILURES)


def test_the_launcher_docs_list_every_exit_code() -> None:
    documented = {int(cells[0]) for cells in _doc_rows(LAUNCHER_DOC, "| code | name") if cells[0].isdigit()}
    assert documented == {contract.EXIT_OK, *contract.EXIT_CODES.values()}


def test_the_launchers_exit_codes_are_the_tables() -> None:
    assert dict(contract.EXIT_CODES) == {
        row.reason: row.exit_code for row in LAUNCHER_FAILURES if row.exit_code is not None
    }
    for row in LAUNCHER_FAILURES:
        if row.exit_code is not None:
            # A LaunchError names the reason; its exit code comes from the row.
            assert LaunchError(row.reason, "why").exit_code == row.exit_code
    assert contract.exit_code(Reason.GPU_WAIT_TIMEOUT) == contract.EXIT_GPU_TIMEOUT
    # verl's own code is passed through: TrainerFailed has no launcher code.
    with pytest.raises(KeyError):
        contract.exit_code(Reason.TRAINER_FAILED)


def test_the_operator_reads_each_code_as_its_row() -> None:
    assert dict(launcher_failure.REASONS) == reasons_by_exit_code(LAUNCHER_FAILURES)
    for row in LAUNCHER_FAILURES:
        if row.exit_code is None:
            continue
        message = entrypoint_failed_message(row.exit_code, "flashrl-launch: it went wrong")
        found = read_failure(message)
        assert found is not None and (found.exit_code, found.reason) == (row.exit_code, row.reason)


def test_the_retry_policy_follows_the_retryable_column() -> None:
    assert non_retryable(LAUNCHER_FAILURES) == NON_RETRYABLE == retry_policy.NON_RETRYABLE
    for row in LAUNCHER_FAILURES:
        end = AttemptEnd(attempt=1, reason=row.reason, message="m", start_step=0, step=5, checkpoint_step=5)
        assert decide(end, max_restarts=3).action == ("retry" if row.retryable else "fail"), row.reason


def test_a_new_row_changes_the_exit_codes_and_the_retry_policy() -> None:
    extended = (*LAUNCHER_FAILURES, NEW_ROW)
    assert NEW_ROW.reason not in contract.EXIT_CODES and NEW_ROW.reason not in NON_RETRYABLE
    assert exit_codes(extended) == {**contract.EXIT_CODES, NEW_ROW.reason: 77}
    assert reasons_by_exit_code(extended)[77] == NEW_ROW.reason
    assert non_retryable(extended) == NON_RETRYABLE | {NEW_ROW.reason}
    retryable = LauncherExit(77, Reason.RAY_JOB_DELETED, True, Severity.TRANSIENT, "transient")
    assert non_retryable((*LAUNCHER_FAILURES, retryable)) == NON_RETRYABLE


def test_a_code_or_reason_in_two_rows_is_refused() -> None:
    twice = LauncherExit(contract.EXIT_GPU_TIMEOUT, Reason.RAY_JOB_DELETED, True, Severity.TRANSIENT, "x")
    with pytest.raises(ValueError, match="two rows"):
        exit_codes((*LAUNCHER_FAILURES, twice))
    again = LauncherExit(78, Reason.GPU_WAIT_TIMEOUT, True, Severity.TRANSIENT, "x")
    with pytest.raises(ValueError, match="two rows"):
        exit_codes((*LAUNCHER_FAILURES, again))


def test_the_crd_describes_each_launcher_code() -> None:
    description = FlashRLJobStatus.model_fields["reason"].description or ""
    for reason, code in contract.EXIT_CODES.items():
        assert re.search(rf"\b{code} {reason}\b", description), (code, reason)
