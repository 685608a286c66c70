"""Files and directories only their owner may read: the engine's default for what it creates.

The metadata DB holds the snapshot signing key and job details, checkpoints hold the jobs'
state, reports and logs name paths and failures, code archives are imported by the jobs.
Another local user must not read them, and must not be able to plant them: what the
engine creates is ``0700`` (directories) / ``0600`` (files), and a directory it *reuses* in
a shared place (``/tmp``) must be owned by this user and writable by nobody else
(:func:`private_dir`), else :class:`~.errors.ConfigurationError` names it.
"""

from __future__ import annotations

import logging
import os
import stat
import tempfile

from ..errors import ConfigurationError
from ..settings import TEMP_DIR

log = logging.getLogger(__name__)

DIR_MODE = 0o700
FILE_MODE = 0o600

#: Spark's default ``spark.redaction.regex`` plus the engine's secrets: the metadata DB URL
#: (a password), the snapshot signing key, and any ``scheme://user:password@`` value. The
#: Spark UI, its REST API and the event log show matching properties as ``*********``.
SPARK_REDACTION_REGEX = (
    r"(?i)secret|password|token|access[.]?key|CKPT_METADATA_URL"
    r"|CKPT_SNAPSHOT_HMAC_KEY|://[^/@\s]*:[^/@\s]*@"
)
#: Spark properties ``spark.ckpt.env.<NAME>`` become the environment variable ``NAME`` of a
#: standalone cluster-mode driver (spark-submit forwards it no environment)
SPARK_ENV_PREFIX = "spark.ckpt.env."


def makedirs_mode(path: str, mode: int) -> str:
    """``os.makedirs`` giving every directory it creates exactly ``mode`` (the umask neither
    narrows nor widens it; the intermediate ones too). Existing directories keep theirs.
    Returns ``path``."""
    missing = []
    head = os.path.abspath(path)
    while head and not os.path.isdir(head):
        missing.append(head)
        parent = os.path.dirname(head)
        if parent == head:
            break
        head = parent
    for d in reversed(missing):
        try:
            os.mkdir(d, mode)
        except FileExistsError:
            continue  # created meanwhile (another process): keep its mode
        os.chmod(d, mode)
    return path


def makedirs_private(path: str) -> str:
    """``os.makedirs`` with ``0700`` for *every* directory it creates, the intermediate ones
    too (``os.makedirs`` gives those the umask's default); existing directories are left as
    they are. Returns ``path``."""
    return makedirs_mode(path, DIR_MODE)


def open_private(path: str, mode: str = "wb", *, append: bool = False):
    """Open ``path`` for writing, creating it ``0600`` (``O_NOFOLLOW``: never through a
    symlink planted in its place)."""
    flags = os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
    flags |= os.O_APPEND if append else os.O_TRUNC
    return os.fdopen(os.open(path, flags, FILE_MODE), mode)


def create_private_file(path: str) -> bool:
    """Create ``path`` empty with mode ``0600`` unless it exists; whether it was created."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def private_dir(path: str, what: str = "directory") -> str:
    """Create ``path`` (``0700``) or check the existing one: a real directory (no symlink),
    owned by this user, not writable by group or others. Returns ``path``."""
    try:
        os.mkdir(path, DIR_MODE)
    except FileExistsError:
        pass
    else:
        os.chmod(path, DIR_MODE)  # the umask does not widen it, make it exact
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise ConfigurationError(
            f"{what} {path} is not a directory (a symlink or a file): refusing to use it"
        )
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        raise ConfigurationError(
            f"{what} {path} belongs to uid {st.st_uid}, not to this user "
            f"(uid {os.getuid()}): refusing to use it"
        )
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ConfigurationError(
            f"{what} {path} is writable by other users (mode "
            f"{stat.S_IMODE(st.st_mode):o}): refusing to use it; "
            f"chmod 700 {path}"
        )
    return path


#: environment variable: the root of every temporary directory the engine and the provider
#: create (code archives, detached job logs, RocksDB working dirs, reports); created ``0700``
#: if missing, and it must belong to this user and be writable by nobody else
TEMP_DIR_ENV = TEMP_DIR.name
#: the name of the per-user base directory under ``$TMPDIR``: ``airflow-checkpoint-<uid>``
TEMP_BASE_PREFIX = "airflow-checkpoint-"

_temp_bases: dict[str, str] = {}  # $TMPDIR -> this process's base directory in it


def _is_own_private_dir(path: str) -> bool:
    """Whether ``path`` is a real directory (no symlink) of this user that nobody else may
    write to -- one another local user cannot have created (they cannot give it our uid)."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return (stat.S_ISDIR(st.st_mode)
            and (not hasattr(os, "getuid") or st.st_uid == os.getuid())
            and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def user_temp_base() -> str:
    """This user's private base directory for temporary files (``0700``): the configured
    ``$CKPT_TEMP_DIR`` if set, else ``$TMPDIR/airflow-checkpoint-<uid>``.

    A shared ``$TMPDIR`` lets any local user create that predictable name first (a denial of
    service: the name would belong to them). Then the base is a directory of this user with
    an unpredictable name, ``$TMPDIR/airflow-checkpoint-<uid>.XXXXXXXX`` (``mkdtemp``): an
    existing one is found again by listing ``$TMPDIR`` and taking the first, by name, that
    belongs to this user and nobody else may write to -- another user can create such names,
    but not owned by this uid, so they are skipped, never used. Processes of one user on one
    host thus agree on the base (two that create the fallback at the very same moment may
    each use their own: the engine needs no cross-process agreement on it).

    Everything under the base is created by this user only: names inside it cannot be
    squatted.
    """
    configured = TEMP_DIR.get()
    if configured:
        path = os.path.abspath(configured)
        makedirs_private(path)
        return private_dir(path, f"temporary directory ${TEMP_DIR_ENV}")
    tmp = tempfile.gettempdir()
    cached = _temp_bases.get(tmp)
    if cached is not None and _is_own_private_dir(cached):
        return cached
    uid = os.getuid() if hasattr(os, "getuid") else 0
    primary = os.path.join(tmp, f"{TEMP_BASE_PREFIX}{uid}")
    try:
        os.mkdir(primary, DIR_MODE)
        os.chmod(primary, DIR_MODE)  # exact, whatever the umask
    except FileExistsError:
        pass
    except OSError:
        primary = ""  # no such name here (e.g. a read-only parent): the fallback decides
    if primary and _is_own_private_dir(primary):
        base = primary
    else:
        prefix = f"{TEMP_BASE_PREFIX}{uid}."
        try:
            names = sorted(n for n in os.listdir(tmp) if n.startswith(prefix))
        except OSError:
            names = []
        found = [os.path.join(tmp, n) for n in names if _is_own_private_dir(os.path.join(tmp, n))]
        base = found[0] if found else tempfile.mkdtemp(prefix=prefix, dir=tmp)  # 0700
        log.warning("%s is not a private directory of uid %s (another user created it?): "
                    "using %s instead; set %s to choose the temporary root",
                    os.path.join(tmp, f"{TEMP_BASE_PREFIX}{uid}"), uid, base, TEMP_DIR_ENV)
    _temp_bases[tmp] = base
    return base


def user_temp_dir(name: str) -> str:
    """``<base>/<name>``, private to this user, where ``<base>`` is :func:`user_temp_base`
    (``$CKPT_TEMP_DIR``, else ``$TMPDIR/airflow-checkpoint-<uid>`` or, when another user holds
    that name, an unpredictable private one): no other local user can pre-create it."""
    return private_dir(os.path.join(user_temp_base(), name), name)


def write_private(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (a fresh ``0600`` temp file in the same
    directory, then renamed over it): a reader sees the old content or the new one."""
    fd, tmp = tempfile.mkstemp(
        dir=os.path.dirname(path) or ".", prefix=f".{os.path.basename(path)}.", suffix=".tmp"
    )
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
