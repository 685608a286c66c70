"""Functions of the FLIP-147 tests (importable by slot processes)."""

from __future__ import annotations

import os

from pipelines import InjectedFailure, RunningSum


def _claim(path: str) -> bool:
    """Create ``path``; False if it exists (a failure point fires once across attempts)."""
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


class EndMarker(RunningSum):
    """A running sum whose ``end_input`` emits one marker row per subtask (not idempotent:
    running it twice emits two), and which fails once, in the notification of the first
    checkpoint it snapshotted after its end of input (that checkpoint holds the markers).

    Not the first notification after its end of input: a checkpoint whose barrier passed
    the task before its end of input may complete after it; restored from that one, the
    task rightly runs ``end_input`` again (a full run once saw exactly that)."""

    def __init__(self, marker_dir: str) -> None:
        super().__init__()
        self.marker_dir = marker_dir

    def open(self, ctx):
        super().open(ctx)
        self.subtask = ctx.subtask_index
        self.ended = False
        self.snapshotted_after_end: int | None = None

    def end_input(self, ctx):
        self.ended = True
        return [
            {"key": "END", "id": -1 - self.subtask, "count": 1, "sum": 0, "attempt": self.attempt}
        ]

    def snapshot_state(self, checkpoint_id):
        super().snapshot_state(checkpoint_id)
        if self.ended and self.snapshotted_after_end is None:
            self.snapshotted_after_end = checkpoint_id

    def notify_checkpoint_complete(self, checkpoint_id):
        super().notify_checkpoint_complete(checkpoint_id)
        after = self.snapshotted_after_end
        if after is not None and checkpoint_id >= after and _claim(os.path.join(self.marker_dir, f"fail-{self.subtask}")):
            raise InjectedFailure(f"after the end of input, checkpoint {checkpoint_id}")
