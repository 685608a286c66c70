"""The metadata DB's engine: URLs, SQLite connection settings, the Alembic schema (create,
upgrade, check) and retries of transient errors."""

from __future__ import annotations

import logging
import os
import random
import stat
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import Engine, create_engine, event, inspect, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import StaticPool

from ..errors import EngineError
from ..fs.private import create_private_file, makedirs_private
from ..settings import SQLITE_BUSY_TIMEOUT

if TYPE_CHECKING:
    from alembic.config import Config

log = logging.getLogger(__name__)




T = TypeVar("T")

#: Folder holding ``env.py`` and ``versions/``.
MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
#: The newest revision under ``migrations/versions``. A DB already at it is checked without
#: importing Alembic (about 0.2 CPU-seconds in every process that opens the metadata DB);
#: tests/integration/engine/checkpoint/test_store.py checks that it is Alembic's head.
SCHEMA_HEAD = "0012"


def sqlite_busy_timeout() -> float:
    """The SQLite busy timeout in seconds (``$CKPT_SQLITE_BUSY_TIMEOUT_S``, default 30)."""
    return SQLITE_BUSY_TIMEOUT.get()
#: Attempts of a transaction that fails with a transient error (lock, serialization, dropped
#: connection), with exponential backoff starting at ``RETRY_BASE_DELAY_S``.
RETRY_ATTEMPTS = 5
RETRY_BASE_DELAY_S = 0.05
#: Minimum length of a job id prefix accepted by :meth:`MetadataStore.resolve_job`.
MIN_JOB_ID_PREFIX = 4

_SQLITE_BEGIN_OPTION = "ckpt_sqlite_begin"
_PG_MIGRATION_LOCK_KEY = 0x636B7074  # "ckpt": advisory lock serializing schema upgrades
_ALEMBIC_VERSION_TABLE = "alembic_version"
_IN_CHUNK = 500  # bound IN (...) lists (SQLite's variable limit)
_alembic_lock = threading.Lock()  # alembic's `context` / `op` proxies are process globals


class MetadataSchemaError(EngineError):
    """The metadata DB schema cannot be used by this version of the package."""



# -- engine and schema -----------------------------------------------------------------------


def to_sqlalchemy_url(url_or_path: str) -> str:
    """Return a SQLAlchemy URL: URLs pass unchanged, a filesystem path becomes an absolute
    ``sqlite:///`` URL (``~`` expanded), ``:memory:`` the in-memory SQLite URL."""
    if "://" in url_or_path:
        # `postgres://` (Heroku, libpq) and a driverless `postgresql://` name the same
        # server; the installed driver is psycopg 3 (SQLAlchemy's default is psycopg2)
        for plain in ("postgres://", "postgresql://"):
            if url_or_path.startswith(plain):
                return "postgresql+psycopg://" + url_or_path[len(plain):]
        return url_or_path
    if url_or_path == ":memory:":
        return "sqlite://"
    if not url_or_path:
        raise ValueError("empty metadata DB URL: pass a SQLAlchemy URL or a SQLite file path")
    return "sqlite:///" + os.path.abspath(os.path.expanduser(url_or_path))


def _is_sqlite_memory(database: str | None, query: dict[str, Any]) -> bool:
    return not database or database == ":memory:" or "mode=memory" in database or (
        query.get("mode") == "memory"
    )


def configure_sqlite_engine(engine: Engine, *, wal: bool = True) -> None:
    """Install the SQLite connection hooks: busy timeout, WAL, foreign keys, and BEGIN
    emitted by SQLAlchemy (``BEGIN IMMEDIATE`` when the execution option asks for it).

    Also usable on ``async_engine.sync_engine`` for an aiosqlite engine.
    """
    busy_ms = int(sqlite_busy_timeout() * 1000)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # sqlite3 must not emit its own BEGIN: the "begin" hook below does.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {busy_ms}")
            if wal:
                cursor.execute("PRAGMA journal_mode = WAL")
                cursor.execute("PRAGMA synchronous = NORMAL")
            cursor.execute("PRAGMA foreign_keys = ON")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        mode = conn.get_execution_options().get(_SQLITE_BEGIN_OPTION, "DEFERRED")
        conn.exec_driver_sql(f"BEGIN {mode}")


def create_metadata_engine(url: str) -> Engine:
    """Create the engine of a metadata DB (URL or SQLite path), with the SQLite hooks."""
    sa_url = make_url(to_sqlalchemy_url(url))
    if sa_url.get_backend_name() != "sqlite":
        return create_engine(sa_url, pool_pre_ping=True)
    if _is_sqlite_memory(sa_url.database, dict(sa_url.query)):
        engine = create_engine(
            sa_url, poolclass=StaticPool, connect_args={"check_same_thread": False}
        )
        configure_sqlite_engine(engine, wal=False)
        return engine
    if sa_url.database and not sa_url.database.startswith("file:"):
        _private_sqlite_file(str(Path(sa_url.database).expanduser()))
    engine = create_engine(sa_url, connect_args={"timeout": sqlite_busy_timeout()})
    configure_sqlite_engine(engine)
    return engine


def _private_sqlite_file(database: str) -> None:
    """The SQLite file holds the snapshot signing key: create it (and missing parent
    directories) private, ``0600``/``0700``, before SQLite does with the umask's mode
    (SQLite gives its ``-wal``/``-shm``/``-journal`` files the DB file's mode). An existing
    file readable by other users is left as it is, with a warning."""
    makedirs_private(os.path.dirname(os.path.abspath(database)))
    if create_private_file(database):
        return
    try:
        st = os.stat(database)
    except OSError:
        return
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO) and database not in _WARNED_MODES:
        _WARNED_MODES.add(database)
        log.warning("metadata DB %s has mode %o: other local users can read its snapshot "
                    "signing key and job details; chmod 600 %s", database,
                    stat.S_IMODE(st.st_mode), database)


_WARNED_MODES: set[str] = set()


def _require_existing_sqlite_file(url: str) -> None:
    """A client that must not create a DB (``migrate=False``) refuses a SQLite URL whose
    file does not exist: opening it would silently create a new, empty DB (a typo in a
    path then looks like "no such job")."""
    sa_url = make_url(url)
    if sa_url.get_backend_name() != "sqlite" or _is_sqlite_memory(sa_url.database,
                                                                     dict(sa_url.query)):
        return
    database = sa_url.database or ""
    if database.startswith("file:"):
        database = database[len("file:"):].split("?", 1)[0]
    if not Path(database).expanduser().is_file():
        raise MetadataSchemaError(
            f"metadata DB {redacted_url(url)}: SQLite file {database} does not exist; check the "
            f"path, or create the DB with `ckpt db upgrade --db {redacted_url(url)}`")


def _write_engine(engine: Engine) -> Engine:
    """The same engine whose transactions take the write lock up front on SQLite."""
    return engine.execution_options(**{_SQLITE_BEGIN_OPTION: "IMMEDIATE"})


_extracted_migrations: Path | None = None


def _migrations_dir() -> Path:
    """The Alembic scripts directory. When this package is imported from a zip archive
    (``spark-submit --py-files``, see ``engine/packaging.py``) Alembic cannot read scripts
    inside it: they are extracted once per process to a temporary directory."""
    global _extracted_migrations
    if MIGRATIONS_DIR.is_dir():
        return MIGRATIONS_DIR
    if _extracted_migrations is None:
        import tempfile
        import zipfile

        archive, _, inner = str(MIGRATIONS_DIR).partition(".zip" + os.sep)
        if not inner:
            raise MetadataSchemaError(f"metadata DB migrations not found at {MIGRATIONS_DIR}")
        target = Path(tempfile.mkdtemp(prefix="ckpt-migrations-"))
        prefix = inner.replace(os.sep, "/") + "/"
        with zipfile.ZipFile(archive + ".zip") as zf:
            for name in zf.namelist():
                if name.startswith(prefix) and not name.endswith("/"):
                    dest = target / name[len(prefix):]
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    dest.write_bytes(zf.read(name))
        _extracted_migrations = target
    return _extracted_migrations


def alembic_config(url: str) -> Config:
    """An Alembic configuration for the metadata DB at ``url``, built without ``alembic.ini``."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(_migrations_dir()))
    # ConfigParser interpolation: a literal % in a password must be doubled.
    cfg.set_main_option("sqlalchemy.url", to_sqlalchemy_url(url).replace("%", "%%"))
    return cfg


def redacted_url(engine_or_url: Engine | str) -> str:
    """The URL with its password hidden: the only form that may be logged or printed."""
    url = engine_or_url.url if isinstance(engine_or_url, Engine) else make_url(engine_or_url)
    return url.render_as_string(hide_password=True)


def _stored_revision(engine: Engine) -> str | None:
    """The schema revision recorded in the DB (None for an empty DB), read without Alembic."""
    with engine.connect() as conn:
        if not inspect(conn).has_table(_ALEMBIC_VERSION_TABLE):
            return None
        return conn.execute(text(f"SELECT version_num FROM {_ALEMBIC_VERSION_TABLE}")).scalar()


def _check_schema(engine: Engine) -> None:
    """Raise :class:`MetadataSchemaError` unless the schema is at the newest revision."""
    head = SCHEMA_HEAD
    current = _stored_revision(engine)
    if current != head:
        raise MetadataSchemaError(
            f"metadata DB {redacted_url(engine)} is at schema revision {current or 'none (empty)'}, "
            f"this client needs {head!r} and does not migrate (migrate=False); run "
            f"`ckpt db upgrade --db {redacted_url(engine)}` or let a job create the schema")


def _upgrade_engine(engine: Engine) -> None:
    """Bring the schema of ``engine``'s DB to the newest revision. Idempotent; concurrent
    callers (threads or processes) serialize on the DB's write lock."""
    if _stored_revision(engine) == SCHEMA_HEAD:  # fast path: no write lock, no alembic at all
        return
    from alembic import command
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory
    from alembic.util.exc import CommandError

    cfg = alembic_config(engine.url.render_as_string(hide_password=False))
    script = ScriptDirectory.from_config(cfg)
    head = script.get_current_head()
    with _alembic_lock, _write_engine(engine).begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_MIGRATION_LOCK_KEY})
        current = MigrationContext.configure(conn).get_current_revision()
        if current == head:
            return  # another process upgraded while we waited for the lock
        if current is not None:
            try:
                script.get_revision(current)
            except CommandError as exc:
                raise MetadataSchemaError(
                    f"metadata DB {redacted_url(engine)} is at schema revision {current!r}, which "
                    f"this version of airflow-checkpoint-provider does not know (newest: "
                    f"{head!r}); upgrade the package"
                ) from exc
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
    log.info("Upgraded metadata DB %s schema from %s to %s", redacted_url(engine),
             current or "empty", head)


def upgrade_database(url: str) -> None:
    """Create or upgrade the metadata DB schema at ``url`` (``ckpt db upgrade``)."""
    engine = create_metadata_engine(url)
    try:
        _retry(lambda: _upgrade_engine(engine), what="schema upgrade")
    finally:
        engine.dispose()


# -- retries ---------------------------------------------------------------------------------

_TRANSIENT_SQLSTATES = {"40001", "40P01"}  # serialization failure, deadlock detected
_TRANSIENT_SQLITE_MESSAGES = ("database is locked", "database table is locked", "database is busy")


def _is_transient(exc: DBAPIError) -> bool:
    if exc.connection_invalidated:
        return True
    orig = exc.orig
    message = str(orig).lower()
    if any(m in message for m in _TRANSIENT_SQLITE_MESSAGES):
        return True
    code = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    return code in _TRANSIENT_SQLSTATES


def _retry(fn: Callable[[], T], *, what: str) -> T:
    for attempt in range(1, RETRY_ATTEMPTS + 1):
        try:
            return fn()
        except DBAPIError as exc:
            if attempt == RETRY_ATTEMPTS or not _is_transient(exc):
                raise
            delay = RETRY_BASE_DELAY_S * 2 ** (attempt - 1) * (1 + random.random())
            log.warning("Metadata DB busy during %s (attempt %d of %d): %s; retrying in %.2f s",
                        what, attempt, RETRY_ATTEMPTS, exc.orig, delay)
            time.sleep(delay)
    raise AssertionError("unreachable")


# -- validation ------------------------------------------------------------------------------


def _choice(enum_type: type[T], value: str, what: str) -> str:
    try:
        return str(enum_type(value))  # type: ignore[call-arg]
    except ValueError:
        allowed = ", ".join(str(m) for m in enum_type)  # type: ignore[attr-defined]
        raise ValueError(f"unknown {what} {value!r}; expected one of {allowed}") from None


def _chunks(items: Sequence[T]) -> Iterator[Sequence[T]]:
    for i in range(0, len(items), _IN_CHUNK):
        yield items[i : i + _IN_CHUNK]
