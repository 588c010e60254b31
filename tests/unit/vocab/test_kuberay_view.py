"""How KubeRay's objects are read (:mod:`flashrl_operator.vocab.kuberay`)."""

from __future__ import annotations

from flashrl_operator.vocab.kuberay import RayJobView

#: What Ray's job supervisor wrote when a driver killed from outside left colour-coded log lines.
COLOURED = (
    "Job entrypoint command failed with exit code -9, last available logs (truncated to 20,000 chars):\n"
    "\x1b[36m(TaskRunner pid=4121)\x1b[0m step:2 - \x1b[1m\x1b[31mKilled\x1b[0m\x1b(B\n"
)


def test_a_ray_jobs_message_is_read_without_terminal_escape_sequences() -> None:
    view = RayJobView.of({"status": {"jobStatus": "FAILED", "message": COLOURED}})
    assert "\x1b" not in view.message
    assert view.message.endswith("(TaskRunner pid=4121) step:2 - Killed\n")
    assert view.message.startswith("Job entrypoint command failed with exit code -9")
    assert RayJobView.of({"status": {"message": 7}}).message == ""
