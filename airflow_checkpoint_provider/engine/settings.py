"""The engine's settings from the environment: every ``CKPT_*`` variable the engine reads.

Each variable is declared here once, as a :class:`Setting`: its name, its default, the
default as the configuration reference shows it, a one-line description and the parser
that turns the text into a typed value (or raises an error naming the variable). Modules
read a setting at the time of use (``HEARTBEAT_TIMEOUT.get()``), never at import time, so
a test or a launcher that sets the variable later is seen. The Airflow side reads them
through :mod:`.client`, which re-exports :data:`SETTINGS` and the shared defaults.

``docs/reference/configuration.md`` lists every variable of :data:`SETTINGS` with the
default shown here (``tests/unit/docs/test_reference_tables.py`` checks both directions), and no
engine module outside this one reads a ``CKPT_*`` variable from the environment itself
(``tests/unit/engine/test_settings.py``).

Shared defaults live here too, so that the engine and the Airflow side cannot disagree:
:data:`DEFAULT_HEARTBEAT_TIMEOUT_S` (when a job without heartbeats is LOST) is the default
of both the catalog's liveness check and the submit operator's reconnect, and
:data:`CLIENT_POLL_SECONDS` is how often ``ckpt`` and the Airflow triggers poll the
metadata DB while they wait.
"""

from __future__ import annotations

import math
import os
import re
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from .errors import CheckpointStorageError, ConfigurationError, EngineError

T = TypeVar("T")

#: seconds without a heartbeat after which an active job is LOST (engine and provider)
DEFAULT_HEARTBEAT_TIMEOUT_S = 60.0
#: how long a SQLite connection waits for another writer before "database is locked"
DEFAULT_SQLITE_BUSY_TIMEOUT_S = 30.0
#: The biggest legitimate frames are Arrow batches on data channels (``arrow_batch_size``
#: rows, 65,536 by default: ~4 MiB at 64 bytes a row, 64 MiB at 1 KiB a row) and the job
#: description each slot receives (the cloudpickled graph with the user's closures, the
#: source split list and the restore handles: usually KiBs to a few MiB). Checkpoint acks
#: carry handles, not state; the channel state of unaligned checkpoints goes to files.
DEFAULT_MAX_FRAME_BYTES = 256 * 1024 * 1024
MIN_FRAME_LIMIT, MAX_FRAME_LIMIT = 64 * 1024, 2**32 - 1  # the header's length is a u32
#: a slot process ends itself this long after its coordinator connection closed
DEFAULT_SLOT_ORPHAN_EXIT_S = 5.0
#: how long a Spark job waits for executors offering its slots (executor JVMs took longer
#: than 15 s to register on a loaded machine)
DEFAULT_SPARK_SLOT_WAIT_S = 60.0
#: five minutes: a healthy server reaches a consistent point in well under a second
#: unless a transaction stays open; long enough for a batch transaction to commit
DEFAULT_CDC_SLOT_WAIT_S = 300.0
#: how often a client waiting on a job or a control request (``ckpt savepoint``/``stop``,
#: ``ckpt run --detach``, the Airflow triggers during their first 30 s) polls the metadata
#: DB: a stop, a promotion or a job start ends within seconds, and each poll is one
#: indexed query
CLIENT_POLL_SECONDS = 0.2
DEFAULT_S3_MAX_ATTEMPTS = 5
DEFAULT_S3_TIMEOUT_S = 10.0
DEFAULT_S3_MULTIPART_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class Setting(Generic[T]):
    """One environment variable of the engine.

    :param name: the variable, ``CKPT_...``.
    :param default: the value when the variable is unset or empty.
    :param shown: the default as ``docs/reference/configuration.md`` shows it.
    :param doc: one line: what it sets.
    :param parse: the (non-empty) text -> the value; raises an error naming the variable.
    :param strip: strip surrounding white space before parsing (numbers, paths), not for
        secrets and URLs, which are taken as written.
    """

    name: str
    default: T
    shown: str
    doc: str
    parse: Callable[[Setting[T], str], T]
    strip: bool = True

    def text(self, environ: Mapping[str, str] | None = None) -> str:
        """The variable's text (``""`` when unset), stripped if :attr:`strip`."""
        raw = (os.environ if environ is None else environ).get(self.name, "")
        return raw.strip() if self.strip else raw

    def get(self, environ: Mapping[str, str] | None = None) -> T:
        """The value now: :attr:`default` when unset or empty, else the parsed text.

        :param environ: another environment to read (default ``os.environ``)."""
        raw = self.text(environ)
        return self.parse(self, raw) if raw else self.default

    def take(self) -> T:
        """The value, removing the variable from this process's environment (so that child
        processes, user code included, do not inherit it)."""
        value = self.get()
        os.environ.pop(self.name, None)
        return value


# -- parsers ---------------------------------------------------------------------------------


def _text(setting: Setting, raw: str) -> str:
    return raw


def _flag(on: str) -> Callable[[Setting, str], bool]:
    """On exactly when the text is ``on``."""
    return lambda setting, raw: raw == on


def _off_when(off: str) -> Callable[[Setting, str], bool]:
    """On unless the text is ``off``."""
    return lambda setting, raw: raw != off


def _any_text(setting: Setting, raw: str) -> bool:
    return True


def _seconds(setting: Setting[float], raw: str) -> float:
    """A number of seconds >= 0 (:class:`ConfigurationError` naming the variable)."""
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value < math.inf:
        raise ConfigurationError(f"{setting.name}={raw!r} must be a number of seconds >= 0 "
                                 f"(default {setting.default:g})")
    return value


def env_seconds(name: str, default: float) -> float:
    """Seconds from the environment variable ``name`` (``default`` when unset or empty).

    Deprecated: declare the variable as a :class:`Setting` with the ``_seconds`` parser
    below and read it with ``.get()``. A variable not declared in :data:`SETTINGS` is read
    once more with a :class:`DeprecationWarning` naming it.

    :raises ConfigurationError: naming ``name``, when the value is not a number >= 0.
    """
    if name not in SETTINGS:
        warnings.warn(f"env_seconds({name!r}) reads a variable that is not declared in "
                      "engine/settings.py: declare it as a Setting and read it with .get()",
                      DeprecationWarning, stacklevel=2)
    return Setting(name, default, f"{default:g}", "", _seconds).get()


def _frame_bytes(setting: Setting[int], raw: str) -> int:
    if not re.fullmatch(r"[0-9]{1,10}", raw) or not MIN_FRAME_LIMIT <= int(raw) <= MAX_FRAME_LIMIT:
        raise ConfigurationError(
            f"{setting.name}={raw!r} must be a whole number of bytes between "
            f"{MIN_FRAME_LIMIT} and {MAX_FRAME_LIMIT} (default {setting.default})")
    return int(raw)


def _busy_timeout(setting: Setting[float], raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise EngineError(f"${setting.name}={raw!r} is not a number of seconds") from None
    if not 0 < value < 86400:
        raise EngineError(f"${setting.name}={raw!r} must be between 0 and 86400 s")
    return value


def _port(setting: Setting[int | None], raw: str) -> int | None:
    try:
        port = int(raw)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise ConfigurationError(f"${setting.name}={raw!r} is not a port number (0-65535); "
                                 f"unset it to turn metrics off")
    return port


def _s3_number(minimum: float) -> Callable[[Setting, str], float]:
    """A number >= ``minimum`` (:class:`CheckpointStorageError` naming the variable)."""
    def parse(setting: Setting, raw: str) -> float:
        try:
            value = float(raw)
        except ValueError:
            raise CheckpointStorageError(f"${setting.name}={raw!r} is not a number") from None
        if value < minimum:
            raise CheckpointStorageError(f"${setting.name}={raw!r} must be >= {minimum:g}")
        return value
    return parse


def _s3_count(setting: Setting, raw: str) -> int:
    """A whole count >= 1 (a fraction is cut off, as before)."""
    return int(_s3_number(1)(setting, raw))


def _part_rows(setting: Setting[int], raw: str) -> int:
    if not re.fullmatch(r"[0-9]{1,10}", raw) or int(raw) < 1:
        raise ConfigurationError(
            f"{setting.name}={raw!r} must be a whole number of rows, at least 1 "
            f"(default {setting.default})")
    return int(raw)


# -- the settings ----------------------------------------------------------------------------

METADATA_URL: Setting[str | None] = Setting(
    "CKPT_METADATA_URL", None, "`./checkpoints/metadata.db` (SQLite)",
    "the metadata DB's SQLAlchemy URL when --db / metadata_url= is not given", _text,
    strip=False)
SNAPSHOT_HMAC_KEY: Setting[str | None] = Setting(
    "CKPT_SNAPSHOT_HMAC_KEY", None, "unset: the metadata DB's own key",
    "the key that signs and verifies snapshots, shared between deployments", _text,
    strip=False)
ALLOWED_SAVEPOINT_ROOTS: Setting[str] = Setting(
    "CKPT_ALLOWED_SAVEPOINT_ROOTS", "", "-",
    "more directories savepoints may be written to (os.pathsep-separated)", _text,
    strip=False)
HEARTBEAT_TIMEOUT: Setting[float] = Setting(
    "CKPT_HEARTBEAT_TIMEOUT_S", DEFAULT_HEARTBEAT_TIMEOUT_S, "60",
    "a job whose driver wrote no heartbeat for this long is LOST", _seconds)
SQLITE_BUSY_TIMEOUT: Setting[float] = Setting(
    "CKPT_SQLITE_BUSY_TIMEOUT_S", DEFAULT_SQLITE_BUSY_TIMEOUT_S, "30",
    "how long a SQLite metadata DB call waits for a lock (0 < seconds < 86400)", _busy_timeout)
MAX_FRAME_BYTES: Setting[int] = Setting(
    "CKPT_MAX_FRAME_BYTES", DEFAULT_MAX_FRAME_BYTES, "268435456 (256 MiB)",
    "the largest frame a runtime connection accepts after authentication", _frame_bytes)
METRICS_PORT: Setting[int | None] = Setting(
    "CKPT_METRICS_PORT", None, "off",
    "serve Prometheus /metrics on the driver at this port (0: any free port)", _port)
TEMP_DIR: Setting[str | None] = Setting(
    "CKPT_TEMP_DIR", None, "`$TMPDIR/airflow-checkpoint-<uid>`",
    "the root of every temporary directory the engine and the provider create", _text)
LOCAL_DIR: Setting[str | None] = Setting(
    "CKPT_LOCAL_DIR", None, "`ckpt-rocksdb` in the temp root above",
    "where RocksDB state lives on a slot's host", _text, strip=False)
SLOT_ORPHAN_EXIT: Setting[float] = Setting(
    "CKPT_SLOT_ORPHAN_EXIT_SECONDS", DEFAULT_SLOT_ORPHAN_EXIT_S, "5",
    "a slot process ends itself this long after its coordinator connection closed", _seconds)
SPARK_SLOT_WAIT: Setting[float] = Setting(
    "CKPT_SPARK_SLOT_WAIT_S", DEFAULT_SPARK_SLOT_WAIT_S, "60",
    "how long a Spark job waits for executors offering its slots", _seconds)
LOG_LEVEL: Setting[str] = Setting(
    "CKPT_LOG_LEVEL", "WARNING", "`WARNING`", "log level of slot processes", _text)
SLOT_FORK_SERVER: Setting[bool] = Setting(
    "CKPT_SLOT_FORK_SERVER", True, "`1`",
    "0: start every local slot as its own process instead of forking it from a fork server",
    _off_when("0"), strip=False)
SPARK_LOG_LEVEL: Setting[str] = Setting(
    "CKPT_SPARK_LOG_LEVEL", "WARN", "`WARN`", "Spark's own log level under the Spark runner",
    _text)
SHIP_CODE: Setting[bool] = Setting(
    "CKPT_SHIP_CODE", False, "off",
    "1: ship the engine and the pipeline's package to Spark executors as --py-files",
    _flag("1"), strip=False)
#: for tests, not users: many snapshot parts from little data
COLUMNAR_PART_ROWS: Setting[int] = Setting(
    "CKPT_COLUMNAR_PART_ROWS", 1 << 15, "32768",
    "rows of a part of a vectorized operator's snapshot (a power of two; smaller values "
    "only for tests: many parts from little data)", _part_rows)
S3_ENDPOINT_URL: Setting[str | None] = Setting(
    "CKPT_S3_ENDPOINT_URL", None, "AWS (or `AWS_ENDPOINT_URL_S3` / `AWS_ENDPOINT_URL`)",
    "an S3-compatible endpoint for s3:// checkpoint storage", _text, strip=False)
S3_MAX_ATTEMPTS: Setting[int] = Setting(
    "CKPT_S3_MAX_ATTEMPTS", DEFAULT_S3_MAX_ATTEMPTS, "5",
    "S3 retries (botocore standard mode)", _s3_count, strip=False)
S3_TIMEOUT: Setting[float] = Setting(
    "CKPT_S3_TIMEOUT_S", DEFAULT_S3_TIMEOUT_S, "10", "S3 connect and read timeout",
    _s3_number(0.1), strip=False)
S3_MULTIPART_THRESHOLD: Setting[int] = Setting(
    "CKPT_S3_MULTIPART_THRESHOLD", DEFAULT_S3_MULTIPART_BYTES, "8 MiB",
    "uploads above this size are multipart", _s3_count, strip=False)
S3_MULTIPART_CHUNKSIZE: Setting[int] = Setting(
    "CKPT_S3_MULTIPART_CHUNKSIZE", DEFAULT_S3_MULTIPART_BYTES, "8 MiB",
    "multipart part size (never below S3's 5 MiB)", _s3_count, strip=False)
CDC_URL: Setting[str | None] = Setting(
    "CKPT_CDC_URL", None, "-", "the CDC source database (ckpt cdc --url)", _text, strip=False)
CDC_SLOT_WAIT_TIMEOUT: Setting[float] = Setting(
    "CKPT_CDC_SLOT_WAIT_TIMEOUT_S", DEFAULT_CDC_SLOT_WAIT_S, "300",
    "default of PostgresCdcSource(slot_wait_timeout_s=); 0 waits without limit", _seconds)
TRACEBACK: Setting[bool] = Setting(
    "CKPT_TRACEBACK", False, "off",
    "ckpt prints the full Python traceback of an error instead of its one-line message",
    _any_text, strip=False)
#: set by the engine, not by users: a job's runtime secret in its local slot processes
JOB_SECRET: Setting[str | None] = Setting(
    "CKPT_JOB_SECRET", None, "set by the engine",
    "a job's runtime secret (hex), in its local slot processes' environment", _text)

#: every setting, by variable name
SETTINGS: dict[str, Setting] = {s.name: s for s in (
    METADATA_URL, SNAPSHOT_HMAC_KEY, ALLOWED_SAVEPOINT_ROOTS, HEARTBEAT_TIMEOUT,
    SQLITE_BUSY_TIMEOUT, MAX_FRAME_BYTES, METRICS_PORT, TEMP_DIR, LOCAL_DIR, SLOT_ORPHAN_EXIT,
    SPARK_SLOT_WAIT, LOG_LEVEL, SLOT_FORK_SERVER, SPARK_LOG_LEVEL, SHIP_CODE, S3_ENDPOINT_URL,
    S3_MAX_ATTEMPTS, S3_TIMEOUT, S3_MULTIPART_THRESHOLD, S3_MULTIPART_CHUNKSIZE, CDC_URL,
    CDC_SLOT_WAIT_TIMEOUT, TRACEBACK, JOB_SECRET, COLUMNAR_PART_ROWS)}
#: the settings users do not set: the engine's own and the tests' knobs (the configuration
#: reference names them apart)
INTERNAL = frozenset({JOB_SECRET.name, COLUMNAR_PART_ROWS.name})
