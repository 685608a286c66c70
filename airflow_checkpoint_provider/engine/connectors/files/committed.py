"""Reading what a :class:`~.sink.FileSink` committed, as its readers would: the records
(:func:`read_committed`), or the part files with the job, checkpoint and subtask that
committed each (:func:`committed_files`), to read them in the order they were committed.

A FileSink commits a part file per subtask and checkpoint, named
``part-<uid>~<job id>~c<checkpoint>~s<subtask>.jsonl``, in the directory of its partition
(``column=value/...``, :mod:`.partitions`); nothing else in the directory is committed
output (staged files wait in ``_staging``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field

from ..sink_names import parse_part_file_name
from .partitions import read_partition_dir

__all__ = ["CommittedFile", "committed_files", "read_committed"]


@dataclass(frozen=True)
class CommittedFile:
    """One part file a FileSink committed.

    ``job_id``, ``checkpoint_id``, ``subtask`` and ``operator_uid`` are read from its name;
    they are ``None`` for a name of the old encoding (``part-<uid>-<job>-c...``), which
    cannot be read without the sink's uid. ``partition`` holds the partition values
    from the directory names, as strings (``None``: the default partition)."""

    path: str
    job_id: str | None
    checkpoint_id: int | None
    subtask: int | None
    operator_uid: str | None = None
    partition: dict[str, str | None] = field(default_factory=dict)

    @property
    def commit_order(self) -> tuple[str, int, int, str]:
        """``(job_id, checkpoint_id, subtask, path)``: within one job, the order in which the
        records were committed (checkpoint by checkpoint; the subtasks of one checkpoint
        commit together, their files are ordered by subtask)."""
        return (self.job_id or "", self.checkpoint_id or 0, self.subtask or 0, self.path)


def committed_files(directory: str) -> list[CommittedFile]:
    """Every part file committed under ``directory``, partitioned or not, sorted by
    :attr:`CommittedFile.commit_order`.

    Within one job that is the order in which its records were committed: for an update
    stream, the last row of a key is its result. Jobs are ordered by id only; when several
    jobs wrote to the directory (a restore starts a new job), order them as they ran, e.g.
    as the metadata DB's job rows were created (``engine.client.MetadataStore``)::

        with MetadataStore(db_url) as store:
            jobs = sorted(store.list_jobs(), key=lambda j: j.created_at)
        rank = {j.job_id: i for i, j in enumerate(jobs)}
        files = sorted(committed_files("out"), key=lambda f: (rank.get(f.job_id, 0), f.commit_order))
        for f in files:
            with open(f.path) as lines:
                rows = [{**f.partition, **json.loads(line)} for line in lines]
    """
    found: list[CommittedFile] = []
    _collect(directory, {}, found)
    return sorted(found, key=lambda f: f.commit_order)


def _collect(directory: str, partition: dict[str, str | None], found: list[CommittedFile]) -> None:
    if not os.path.isdir(directory):
        return
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        if name.startswith("part-"):
            n = parse_part_file_name(name)
            found.append(CommittedFile(path, n.job_id, n.checkpoint_id, n.subtask,
                                       n.operator_uid, partition) if n is not None
                         else CommittedFile(path, None, None, None, None, partition))
        elif (got := read_partition_dir(name)) is not None and os.path.isdir(path):
            _collect(path, {**partition, got[0]: got[1]}, found)


def read_committed(directory: str) -> Iterator[dict]:
    """Yield every committed record of a :class:`FileSink` directory, partitioned or not:
    a partitioned sink's records get their partition columns back from the directory names
    (as strings; ``None`` for the default partition) unless the rows kept them. The files
    are read in the order of their names (:func:`committed_files` gives the commit order)."""
    yield from _read_dir(directory, {})


def _read_dir(directory: str, values: dict) -> Iterator[dict]:
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if name.startswith("part-"):
            with open(path, encoding="utf-8") as f:
                for line in f:
                    record = json.loads(line)
                    for col, value in values.items():
                        record.setdefault(col, value)
                    yield record
        elif (got := read_partition_dir(name)) is not None and os.path.isdir(path):
            yield from _read_dir(path, {**values, got[0]: got[1]})
