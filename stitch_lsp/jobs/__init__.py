"""Background jobs: queue, priorities, cancellation, progress events, result cache.

Plain Python: nothing here imports ``stitch_lsp.lsp`` (the editor layer listens
to job events and turns them into work-done progress).
"""

from stitch_lsp.jobs.queue import (
    Job,
    JobCancelled,
    JobListener,
    JobQueue,
    JobSpec,
    JobState,
    JobTimedOut,
    Priority,
    QueueClosed,
)

__all__ = [
    "Job",
    "JobCancelled",
    "JobListener",
    "JobQueue",
    "JobSpec",
    "JobState",
    "JobTimedOut",
    "Priority",
    "QueueClosed",
]
