"""What every task of a slot shares (:class:`TaskEnvironment`)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from ...plan.graph import ExecutionGraph
from ...protocol import messages as M


class TaskEnvironment:
    """What every task of a slot shares."""

    def __init__(self, *, job_id: str, job_name: str, attempt: int, graph: ExecutionGraph,
                 job_dir: str, exactly_once: bool, batch_size: int,
                 arrow_batch_size: int | None = None,
                 send: Callable[[M.FromSlot], None], upload_pool: ThreadPoolExecutor,
                 source_splits: dict[str, list[str]] | None = None,
                 state_backend: dict | None = None, fence_sinks: bool = False) -> None:
        self.job_id = job_id
        self.fence_sinks = fence_sinks
        self.job_name = job_name
        self.attempt = attempt
        self.graph = graph
        self.job_dir = job_dir
        self.exactly_once = exactly_once
        self.batch_size = batch_size
        #: rows per read once the source emits Arrow batches
        self.arrow_batch_size = arrow_batch_size or batch_size
        self.send = send
        self.upload_pool = upload_pool
        self.source_splits = source_splits or {}
        self.state_backend = state_backend or {"kind": "heap"}
