"""The clean-ups of a :class:`~.sink.FileSink`'s files in one directory: deleting the part
files a job committed after a checkpoint (a restore falls back past corrupt newer ones: they
are written again) and the staged files of an ended job (a new job restored its checkpoint);
with what they look for: a job's staged files (:func:`_staged_of`, also the writer's abort)
and the partition directories (:func:`partition_dirs`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Sequence

from ..sink_names import SinkName, parse_part_file_name, parse_staged_file_name
from .modes import _fsync_dir
from .partitions import read_partition_dir
from .restore import STAGED_EXT, STAGING

#: the file sink's logger (these clean-ups log as the sink)
log = logging.getLogger(f"{__package__}.files")


def _discard_committed_in(directory: str, columns: Sequence[str], operator_uid: str,
                          job_id: str, checkpoint_id: int) -> list[str]:
    """Delete the part files job ``job_id`` committed for ``operator_uid`` after
    ``checkpoint_id`` under ``directory``; returns their paths relative to it."""
    if not os.path.isdir(directory):
        return []
    doomed = []
    for part in partition_dirs(directory, columns):
        where = os.path.join(directory, part)
        gone = []
        for name in sorted(os.listdir(where)):
            p = parse_part_file_name(name)  # the old encoding is ambiguous: never deleted
            if (p is not None and p.operator_uid == operator_uid and p.job_id == job_id
                    and p.checkpoint_id is not None and p.checkpoint_id > checkpoint_id):
                os.remove(os.path.join(where, name))
                gone.append(f"{part}/{name}" if part else name)
        if gone:
            _fsync_dir(where)
        doomed += gone
    if doomed:
        log.warning("File sink %r: discarded %d part files committed after checkpoint %d of "
                    "job %s in %s (they are written again from checkpoint %d)", operator_uid,
                    len(doomed), checkpoint_id, job_id, directory, checkpoint_id)
    return doomed


def _discard_staged_in(directory: str, operator_uid: str, job_id: str) -> list[str]:
    """Delete the ``.inprogress`` files job ``job_id`` staged for ``operator_uid`` in
    ``directory/_staging``; returns their names."""
    staging = os.path.join(directory, STAGING)
    if not os.path.isdir(staging):
        return []
    doomed = [n for n in sorted(os.listdir(staging))
              if _staged_of(n, operator_uid, job_id) is not None]
    for name in doomed:
        os.remove(os.path.join(staging, name))
    if doomed:
        log.info("File sink %r: removed %d staged files left by ended job %s in %s",
                 operator_uid, len(doomed), job_id, directory)
    return doomed


def _staged_of(name: str, operator_uid: str, job_id: str) -> SinkName | None:
    """``name`` parsed if it is a file ``job_id`` staged for ``operator_uid``. Files of the
    old ``-`` encoding are never matched: they could be another job's (they are invisible to
    readers; remove them by hand once no snapshot names them)."""
    p = parse_staged_file_name(name)
    if (p is None or p.ext != STAGED_EXT or p.operator_uid != operator_uid
            or p.job_id != job_id):
        return None
    return p


def partition_dirs(directory: str, columns: Sequence[str]) -> Iterator[str]:
    """The relative paths of the partition directories under ``directory`` (``""`` itself
    when unpartitioned): those whose names parse as the partition columns, in order."""
    if not columns:
        yield ""
        return
    level = [""]
    for col in columns:
        nxt = []
        for rel in level:
            for name in sorted(os.listdir(os.path.join(directory, rel) if rel else directory)):
                got = read_partition_dir(name)
                if got is not None and got[0] == col and \
                        os.path.isdir(os.path.join(directory, rel, name)):
                    nxt.append(f"{rel}/{name}" if rel else name)
        level = nxt
    yield from level
