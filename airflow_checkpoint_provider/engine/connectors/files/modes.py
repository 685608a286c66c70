"""What a file-writing sink creates on the local file system: its permissions (issue 50) --
its owner's only by default, directories ``0700`` and files ``0600``, since the records may be
replicated database rows (CDC); ``file_mode`` and ``dir_mode`` widen them, exactly (the umask
does not narrow them) -- and the fsync that makes a directory's changes durable. Used by
:class:`~.sink.FileSink` and the lakehouse sinks (:mod:`..lakehouse.delta`, :mod:`..lakehouse.iceberg`).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from typing import BinaryIO

from ...errors import ConfigurationError

#: default mode of the files a file-writing sink creates (issue 50: the output holds the
#: job's records, replicated database rows for CDC; other local users must not read them)
OUTPUT_FILE_MODE = 0o600
#: default mode of the directories a file-writing sink creates
OUTPUT_DIR_MODE = 0o700


def check_output_modes(file_mode: int, dir_mode: int, *, where: str) -> tuple[int, int]:
    """``(file_mode, dir_mode)`` checked: permission bits (``0o000``..``0o777``, no
    set-uid/gid or sticky bit) that let the owner read and write the files and read, write
    and enter the directories -- committed output must stay readable by the job's user."""
    for name, value, owner in (("file_mode", file_mode, 0o600), ("dir_mode", dir_mode, 0o700)):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 0o777:
            raise ConfigurationError(
                f"{where}: {name} must be permission bits 0o000..0o777 (e.g. 0o640), "
                f"not {value!r}")
        if value & owner != owner:
            raise ConfigurationError(
                f"{where}: {name} {value:#o} does not give the owner {owner:#o} (the job "
                f"must read and write its own output); use e.g. {value | owner:#o}")
    return file_mode, dir_mode


_umask_lock = threading.Lock()


@contextlib.contextmanager
def output_umask(file_mode: int, dir_mode: int) -> Iterator[None]:
    """Run a library that creates the output files itself (delta-rs, pyiceberg) under the
    umask ``0o777 & ~(file_mode | dir_mode)``: with the defaults ``0o077`` (its files
    ``0600``, its directories ``0700``); ``0o640``/``0o750`` give ``0o027``. The umask is the
    process's: the lock keeps two sinks of one slot from interleaving theirs, and code that
    gives explicit modes (the engine's private files) is not widened by it."""
    mask = 0o777 & ~(file_mode | dir_mode)
    with _umask_lock:
        old = os.umask(mask)
        try:
            yield
        finally:
            os.umask(old)


def open_new_file(path: str, mode: int, *, append: bool = False) -> BinaryIO:
    """Open ``path`` for writing with exactly ``mode`` if this creates it: a new file (never
    one that exists), or -- ``append`` -- this writer's own file, continued."""
    flags = os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
    flags |= os.O_APPEND if append else os.O_EXCL
    fd = os.open(path, flags, mode)
    try:
        if not append:
            os.fchmod(fd, mode)  # exact, whatever the umask
        return os.fdopen(fd, "ab" if append else "wb")
    except BaseException:
        os.close(fd)
        raise


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
