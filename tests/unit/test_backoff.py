"""Transient API errors are retried with exponential backoff, bounded."""

from flashrl_operator.handlers import backoff_delay


def test_backoff_doubles_per_retry_from_the_base() -> None:
    assert [backoff_delay(5.0, r, 300.0) for r in range(5)] == [5.0, 10.0, 20.0, 40.0, 80.0]


def test_backoff_is_capped_even_after_many_retries() -> None:
    assert backoff_delay(5.0, 7, 300.0) == 300.0
    assert backoff_delay(5.0, 10_000, 300.0) == 300.0
