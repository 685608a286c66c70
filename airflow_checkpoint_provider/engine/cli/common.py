"""What every verb of the ``ckpt`` command shares: the ``main`` group, the metadata DB
option and store, JSON output and loading a pipeline from ``module:function``."""

from __future__ import annotations

import dataclasses
import importlib
import json
import logging
import os
import sys
import unicodedata
from datetime import datetime

import click

from ..datastream.api import DEFAULT_METADATA_ENV, Pipeline, default_metadata_url
from ..settings import TRACEBACK


def _db_url(db: str | None) -> str:
    return db or default_metadata_url("checkpoints")


def _json_default(value):
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(type(value).__name__)


def _echo_json(obj) -> None:
    # json.dumps escapes every control character (\u001b): safe for a terminal as it is
    click.echo(json.dumps(obj, default=_json_default, indent=2, sort_keys=True))


def _visible(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_safe(text: object) -> str:
    """``text`` with every control character but newline and tab (C0, DEL, C1 -- ESC starts
    the terminal's escape sequences) and every bidirectional override shown as a visible
    ``\\xNN`` / ``\\uNNNN``: a job name, failure reason or path from the metadata DB cannot
    retitle, recolour or rewrite the user's terminal."""
    return "".join(_visible(ch) if (unicodedata.category(ch) == "Cc" and ch not in "\n\t")
                   or ch in _BIDI else ch for ch in str(text))


_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e"
                  "\u2066\u2067\u2068\u2069")


def echo(message: object = "", **kwargs) -> None:
    """``click.echo`` of :func:`terminal_safe` text: every human-readable line of ``ckpt``."""
    click.echo(terminal_safe(message), **kwargs)


def _record(rec) -> dict:
    return dataclasses.asdict(rec)


def _store(db: str | None):
    """The metadata DB of a verb that reads or controls jobs: it must exist (a SQLite path
    that does not exist is refused, never created; `ckpt db upgrade` creates one)."""
    from ..catalog import MetadataStore

    return MetadataStore(_db_url(db), migrate=False)


JAVA_MISSING = ("Spark could not start: its Java gateway exited. Is Java (17 or newer) "
                "installed and on PATH, or JAVA_HOME set to it? (e.g. `apt-get install "
                "openjdk-17-jre-headless`); `--runner local` needs no Java")


def one_line_error(exc: BaseException) -> str | None:
    """The one-line message of an error a user meets on day one (a wrong metadata DB URL,
    an unreachable server, no Java), else ``None`` (a traceback is more useful then)."""
    from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError

    from ..errors import EngineError

    if isinstance(exc, (NoSuchModuleError, ArgumentError)):
        return (f"metadata DB URL: {exc} (PostgreSQL: postgresql+psycopg://user:password@"
                "host:5432/db; SQLite: a file path or sqlite:////absolute/path)")
    if isinstance(exc, DBAPIError):
        cause = str(exc.orig if exc.orig is not None else exc).strip()
        first = next((ln.strip() for ln in cause.splitlines() if ln.strip()), cause)
        return (f"metadata DB: {type(exc.orig or exc).__name__}: {first} (check --db or "
                f"${DEFAULT_METADATA_ENV})")
    text = f"{type(exc).__name__}: {exc}"
    if "JAVA_GATEWAY_EXITED" in text or "Java gateway process exited" in text:
        return JAVA_MISSING
    if isinstance(exc, EngineError):
        return str(exc)
    return None


class CkptGroup(click.Group):
    """Errors a user can act on end in one line (``Error: ...``, exit 1), not a traceback;
    ``$CKPT_TRACEBACK=1`` shows the traceback."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except click.ClickException as exc:
            # its message may carry a job name, path or failure reason from the metadata DB
            # (``Error: ...`` is printed by click, not by :func:`echo`)
            exc.message = terminal_safe(exc.message)
            raise
        except (click.exceptions.Exit, click.Abort):
            raise
        except Exception as exc:
            message = None if TRACEBACK.get() else one_line_error(exc)
            if message is None:
                raise
            raise click.ClickException(terminal_safe(message)) from None


def load_pipeline(reference: str) -> Pipeline:
    """Import ``module:function`` and call it; it must return a Pipeline."""
    module_name, _, attr = reference.partition(":")
    if not module_name or not attr:
        raise click.BadParameter(f"{reference!r} is not of the form module:function",
                                 param_hint="PIPELINE")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise click.BadParameter(f"cannot import module {module_name!r}: {exc}",
                                 param_hint="PIPELINE") from exc
    fn = getattr(module, attr, None)
    if fn is None:
        raise click.BadParameter(f"module {module_name!r} has no {attr!r}", param_hint="PIPELINE")
    pipeline = fn() if callable(fn) else fn
    if not isinstance(pipeline, Pipeline):
        raise click.BadParameter(f"{reference} returned {type(pipeline).__name__}, not a Pipeline",
                                 param_hint="PIPELINE")
    return pipeline


db_option = click.option("--db", envvar=DEFAULT_METADATA_ENV,
                         help="Metadata DB (SQLAlchemy URL or SQLite path).")
timeout_option = click.option("--timeout", type=float, default=120.0, show_default=True,
                              help="Seconds to wait for the job's answer.")
json_option = click.option("--json", "as_json", is_flag=True)


@click.group(cls=CkptGroup)
@click.option("-v", "--verbose", count=True, help="More logging (-v info, -vv debug).")
def main(verbose: int) -> None:
    """Run and inspect checkpointed pipelines."""
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
