"""An exactly-once file sink (two-phase commit over file renames).

Each sink subtask writes the records of one checkpoint epoch into a staging file under
``<directory>/_staging/``. At the checkpoint barrier the file is flushed, fsynced and closed
(pre-commit) and its name goes into the checkpoint. When the checkpoint completes, the
staging file is renamed to its final name ``part-<uid>-<job>-c<checkpoint>-s<subtask>.jsonl``
(commit; a rename is atomic and repeating it is harmless). After a failure, the transactions
of the restored checkpoint are committed and this job's other staging files from earlier
attempts are deleted (abort). Readers see only ``part-*`` files: committed output.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from collections.abc import Iterator

from .base import Sink, SinkWriter, SourceContext

log = logging.getLogger(__name__)

STAGING = "_staging"


class FileSink(Sink):
    """Write records as JSON lines with exactly-once semantics.

    :param directory: output directory (created if missing).
    """

    def __init__(self, directory: str) -> None:
        self.directory = os.path.abspath(directory)

    def create_writer(self, ctx: SourceContext) -> SinkWriter:
        return _FileSinkWriter(self.directory, ctx)

    def describe(self) -> str:
        return f"files({self.directory})"


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _FileSinkWriter(SinkWriter):
    def __init__(self, directory: str, ctx: SourceContext) -> None:
        self.dir = directory
        self.staging_dir = os.path.join(directory, STAGING)
        os.makedirs(self.staging_dir, exist_ok=True)
        self.ctx = ctx
        self.job8 = ctx.job_id[:8]
        self.prefix = f"{ctx.operator_uid}-{self.job8}-"
        self._file = None
        self._name: str | None = None

    def _open(self) -> None:
        self._name = (f"{self.prefix}a{self.ctx.attempt}-s{self.ctx.subtask_index}-"
                      f"{uuid.uuid4().hex[:8]}.inprogress")
        self._file = open(os.path.join(self.staging_dir, self._name), "w", encoding="utf-8")

    def write(self, records: list[dict]) -> None:
        if self._file is None:
            self._open()
        self._file.write("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records))

    def pre_commit(self, checkpoint_id: int) -> list[object]:
        if self._file is None:
            return []
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        txn = {"staging": self._name,
               "final": f"part-{self.ctx.operator_uid}-{self.job8}-c{checkpoint_id:06d}-"
                        f"s{self.ctx.subtask_index:03d}.jsonl"}
        self._file, self._name = None, None
        return [txn]

    def commit(self, transactions: list[object]) -> None:
        for txn in transactions:
            src = os.path.join(self.staging_dir, txn["staging"])
            dst = os.path.join(self.dir, txn["final"])
            try:
                os.replace(src, dst)
            except FileNotFoundError:
                if not os.path.exists(dst):
                    raise RuntimeError(
                        f"file sink {self.ctx.operator_uid!r}: transaction {txn['staging']} is "
                        f"neither staged nor committed in {self.dir}; its data is lost"
                    ) from None
        if transactions:
            _fsync_dir(self.dir)

    def recover(self, transactions: list[object]) -> None:
        # Every subtask receives every restored transaction; subtask 0 commits and aborts.
        if self.ctx.subtask_index != 0:
            return
        self.commit(transactions)
        keep = {t["staging"] for t in transactions}
        for name in os.listdir(self.staging_dir):
            if not name.startswith(self.prefix) or name in keep:
                continue
            attempt = name[len(self.prefix):].split("-", 1)[0]
            if attempt != f"a{self.ctx.attempt}":
                os.remove(os.path.join(self.staging_dir, name))
                log.debug("aborted staged transaction %s", name)

    def close(self) -> None:
        if self._file is not None:
            # Records after the last checkpoint are not part of any transaction to commit.
            self._file.close()
            self._file = None


def read_committed(directory: str) -> Iterator[dict]:
    """Yield every committed record of a :class:`FileSink` directory."""
    for name in sorted(os.listdir(directory)):
        if name.startswith("part-"):
            with open(os.path.join(directory, name), encoding="utf-8") as f:
                for line in f:
                    yield json.loads(line)
