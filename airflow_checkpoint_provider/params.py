"""Typed DAG parameters for DAGs that start checkpointed jobs: a DAG run's conf is untrusted.

Airflow's security model: DAG authors are trusted, users who may only *trigger* a DAG are
not. Whatever a trigger's conf says reaches the job's command line and environment, so
every parameter of the example DAGs is a typed :class:`~airflow.sdk.Param` whose JSON schema
Airflow checks before the run is created (a conf that does not match is refused with
``ParamValidationError`` naming the parameter):

* :func:`pipeline_param` -- one of an allowlist the DAG author keeps in the DAG file (a
  module-level constant): a triggering user chooses among the author's pipelines and can
  name no other module (importing a module runs its code);
* :func:`job_name_param` -- a job name (``[A-Za-z0-9][A-Za-z0-9._-]*``, no ``..``);
* :func:`job_env_param` -- environment of the job: only variable names the author lists
  (the options the pipelines read), each value bounded by the author's schema (enum,
  pattern, minimum/maximum: :func:`env_integer`, :func:`env_number`, :func:`env_pattern`,
  :func:`env_enum`); never a free string, so never a path, a host or a URL;
* :func:`connection_param` -- an external system: one of the Airflow connection ids the
  author lists; ``SubmitCheckpointedJobOperator(env_from_connections=...,
  allowed_connections=...)`` resolves its URI in the worker (never a URL from a conf);
* :func:`directory_param` -- empty, or an absolute path or an ``s3://bucket/prefix`` URL
  under the author's roots, without ``..`` components; :func:`check_run_params` checks it
  in the worker (local paths after resolving symlinks; roots fixed in the DAG file, or
  read in the worker such as :func:`example_savepoint_roots`), with every other param
  against the author's schema, before anything starts.

The rule: a run's conf may *choose among* values the DAG author fixed in code; it never
names a host, a credential, a path or code. The submit hook refuses interpreter and loader
variables on its own (:mod:`airflow_checkpoint_provider.hooks.job_env`), whoever passes them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from airflow.sdk import Param

from airflow_checkpoint_provider.engine.client import (
    ALLOWED_SAVEPOINT_ROOTS,
    MAX_NAME_LENGTH,
    SETTINGS,
    Setting,
)
from airflow_checkpoint_provider.examples import WORKSPACE_PATTERN
from airflow_checkpoint_provider.settings import EXAMPLE_DIR

# ``$`` of Python's ``re`` (jsonschema uses re.search) also matches before a trailing
# newline; ``(?![\s\S])`` matches only at the true end, in Python and in the UI's JavaScript
_END = r"(?![\s\S])"
#: a job name (the engine's rule, engine/names.py)
JOB_NAME_PATTERN = rf"^(?!.*\.\.)[A-Za-z0-9][A-Za-z0-9._-]{{0,{MAX_NAME_LENGTH - 1}}}$" + _END
#: ``module.path:function``
PIPELINE_PATTERN = (
    r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$" + _END
)
#: empty, or an absolute path or an ``s3://`` URL (the roots decide which is allowed)
DIRECTORY_PATTERN = r"^$|^(/|s3://[a-z0-9])"
#: what no directory from a conf may hold anywhere: a ``..`` component, a control character
#: (a schema's ``not``: its refusal names this short pattern, not the roots' one)
DIRECTORY_FORBIDDEN = r"(^|/)\.\.(/|$)|[\x00-\x1f\x7f]"
#: an S3 root: ``s3://bucket`` or ``s3://bucket/prefix`` (a bucket name's characters)
S3_ROOT = re.compile(r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[^\x00-\x1f\x7f]*)?$")


def job_name_param(default: str, description: str = "job name") -> Param:
    return Param(
        default,
        type="string",
        minLength=1,
        maxLength=MAX_NAME_LENGTH,
        pattern=JOB_NAME_PATTERN,
        description=description,
    )


def pipeline_param(default: str, allowed: Iterable[str], description: str = "") -> Param:
    """One of ``allowed`` (``module:function`` references the DAG author lists)."""
    allowed = list(allowed)
    if default not in allowed:
        raise ValueError(f"default pipeline {default!r} is not in the allowlist {allowed}")
    return Param(
        default,
        type="string",
        enum=allowed,
        pattern=PIPELINE_PATTERN,
        description=description or "one of the pipelines this DAG may start",
    )


def job_env_param(
    default: Mapping[str, object], allowed: Mapping[str, Mapping[str, Any]], description: str = ""
) -> Param:
    """An environment of the job holding only the variables in ``allowed``, each value
    matching the DAG author's JSON schema for it (``{name: schema}``: :func:`env_integer`,
    :func:`env_number`, :func:`env_pattern`, :func:`env_enum`). There is no free string: a
    conf never names a path, a host or a URL here (external systems are connections,
    :func:`connection_param`; directories are :func:`directory_param`)."""
    if not isinstance(allowed, Mapping):
        raise TypeError(
            "job_env_param needs {variable: JSON schema of its value} (env_integer, env_pattern, "
            "...), not bare names: a free string value could name a path, a host or a URL"
        )
    for name, schema in allowed.items():
        if not isinstance(schema, Mapping) or not ({"enum", "pattern", "maximum"} & set(schema)):
            raise ValueError(
                f"job_env variable {name!r}: its schema must bound the value (enum, pattern, "
                f"or minimum/maximum), not {schema!r}"
            )
    unknown = set(default) - set(allowed)
    if unknown:
        raise ValueError(f"default job_env names {sorted(unknown)} not in the allowlist")
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {name: dict(s) for name, s in sorted(allowed.items())},
        "additionalProperties": False,
    }
    return Param(
        dict(default),
        **schema,
        description=description or f"environment of the job: only {', '.join(sorted(allowed))}",
    )


def env_integer(minimum: int, maximum: int) -> dict[str, Any]:
    """An integer value of an environment variable, ``minimum`` to ``maximum`` (a JSON number
    in the conf; the job gets its decimal text)."""
    return {"type": "integer", "minimum": minimum, "maximum": maximum}


def env_number(minimum: float, maximum: float, *, exclusive_minimum: bool = False) -> dict[str, Any]:
    """A number (``float``), ``minimum`` (excluded with ``exclusive_minimum``) to ``maximum``."""
    low = {"exclusiveMinimum": minimum} if exclusive_minimum else {"minimum": minimum}
    return {"type": "number", **low, "maximum": maximum}


def env_pattern(pattern: str, max_length: int = 256) -> dict[str, Any]:
    """A string matching ``pattern`` (anchor it: ``^...$``), at most ``max_length`` long."""
    return {"type": "string", "pattern": pattern, "maxLength": max_length}


def env_enum(values: Iterable[str]) -> dict[str, Any]:
    """One of ``values``."""
    return {"type": "string", "enum": list(values)}


def connection_param(default: str, allowed: Iterable[str], description: str = "") -> Param:
    """The id of an Airflow connection, one of ``allowed`` (the DAG author's list). Pass it to
    ``SubmitCheckpointedJobOperator(env_from_connections={VAR: "{{ params.<name> }}"},
    allowed_connections=<the same list>)``: the operator resolves the connection's URI in the
    worker and refuses an id outside the list again, even if the params were loosened."""
    allowed = list(allowed)
    if default not in allowed:
        raise ValueError(f"default connection {default!r} is not in the allowlist {allowed}")
    return Param(default, type="string", enum=allowed,
                 description=description or f"connection: one of {', '.join(allowed)}")


def directory_param(description: str, roots: Iterable[str] | None = None) -> Param:
    """Empty (the job's own directory) or an absolute path without ``..`` components, under
    one of the DAG author's roots. With ``roots`` (absolute paths known where the DAG file is
    parsed) Airflow refuses other paths when the run is created; without, the roots are the
    worker's (a callable given to :func:`check_run_params`, e.g.
    :func:`example_savepoint_roots`). Either way :func:`check_run_params` checks the path
    again in the worker after resolving symlinks (a link inside a root that points outside is
    refused), before anything starts."""
    forbidden = {"description": "a '..' path component or a control character",
                 "pattern": DIRECTORY_FORBIDDEN}
    if roots is None:
        return Param("", type="string", maxLength=4096, pattern=DIRECTORY_PATTERN,
                     description=f"{description}; empty, or under the DAG's roots "
                     "(an absolute path or s3://bucket/prefix)", **{"not": forbidden})
    roots = normalized_roots(roots)
    inside = "|".join(_js_escape(r) for r in roots)
    # short enough to read in the refusal ("'x' does not match '^$|^(/data/sp|s3://b/sp)
    # (/.*)?$'"): the roots; '..' and control characters are the 'not' pattern's
    pattern = rf"^$|^({inside})(/.*)?$" if roots else r"^$"
    return Param(
        "", type="string", maxLength=4096, pattern=pattern,
        description=f"{description}; empty, or under {', '.join(roots) or '(no root: empty only)'}",
        **{"not": forbidden},
    )


def normalized_roots(roots: Iterable[str]) -> tuple[str, ...]:
    """``roots`` as normalized absolute paths or ``s3://bucket[/prefix]`` URLs (without a
    trailing ``/``); ``/``, relative roots and other URLs are refused."""
    out = []
    for root in roots:
        if isinstance(root, str) and root.startswith("s3://"):
            norm = root.rstrip("/")
            if not S3_ROOT.match(norm) or ".." in norm[5:].split("/"):
                raise ValueError(f"directory root {root!r} must be s3://bucket or "
                                 "s3://bucket/prefix (a bucket name, no '..')")
            out.append(norm)
            continue
        if not isinstance(root, str) or not os.path.isabs(root):
            raise ValueError(f"directory root {root!r} must be an absolute path")
        norm = os.path.normpath(root)
        if norm in ("/", "//"):
            raise ValueError("directory root '/' confines nothing: name a directory")
        out.append(norm)
    return tuple(dict.fromkeys(out))


def env_roots(setting: Setting[str] | str = ALLOWED_SAVEPOINT_ROOTS) -> tuple[str, ...]:
    """Roots from a setting (``os.pathsep``-separated absolute paths), by default the
    deployment's ``$CKPT_ALLOWED_SAVEPOINT_ROOTS``; a variable name reads that setting, or
    the deployment's own variable of that name."""
    from airflow_checkpoint_provider.engine.fs.storage import split_locations

    if isinstance(setting, str):
        setting = SETTINGS.get(setting) or Setting(setting, "", "-", "", _as_written,
                                                   strip=False)
    return normalized_roots(split_locations(setting.get()))


def _as_written(setting: Setting, raw: str) -> str:
    return raw


def example_savepoint_roots() -> tuple[str, ...]:
    """The example DAGs' savepoint roots, read in the worker (the deployment's, never a
    conf's): the example pipelines' own directory ``$CKPT_EXAMPLE_DIR`` (``./demo-output``
    without it, as the pipelines do), whose ``savepoints/`` they use and under which every
    workspace (``CKPT_EXAMPLE_WORKSPACE``) lies, and the deployment's
    ``$CKPT_ALLOWED_SAVEPOINT_ROOTS``."""
    own = os.path.abspath(EXAMPLE_DIR.get())
    return normalized_roots([own, *env_roots(ALLOWED_SAVEPOINT_ROOTS)])


def _js_escape(text: str) -> str:
    """``text`` literally in a regex both Python's ``re`` and JavaScript read alike."""
    return re.sub(r"([\\^$.|?*+()\[\]{}])", r"\\\1", text)


class DirectoryNotAllowedError(ValueError):
    """A directory from a run's conf outside the DAG author's roots (after symlinks)."""

    def __init__(self, param: str, path: str, resolved: str, roots: tuple[str, ...]) -> None:
        self.param, self.path, self.resolved, self.roots = param, path, resolved, roots
        via = (f" (resolves to {resolved})" if not path.startswith("s3://")
               and resolved != os.path.normpath(path) else "")
        super().__init__(
            f"param {param!r}: directory {path!r}{via} is not under the allowed roots "
            f"({', '.join(roots) or 'none: only empty is allowed'})")


def resolved_path(path: str) -> str:
    """``path`` with symlinks resolved: ``os.path.realpath`` of its deepest existing
    ancestor, plus the part that does not exist yet."""
    path = os.path.normpath(path)
    head, tail = path, []
    while not os.path.lexists(head):
        parent = os.path.dirname(head)
        if parent == head:
            break
        tail.append(os.path.basename(head))
        head = parent
    return os.path.join(os.path.realpath(head), *reversed(tail))


def check_directory(param: str, path: object, roots: Iterable[str]) -> str:
    """The resolved ``path`` (``""`` stays ``""``: the job's own directory), or
    :class:`DirectoryNotAllowedError` naming ``param``, the path and the roots unless it is
    absolute, without ``..`` and, after symlink resolution, under one of ``roots``."""
    roots = normalized_roots(roots)
    if path in (None, ""):
        return ""
    text = str(path)
    if text.startswith("s3://"):  # no symlinks in S3: the URL's key prefix decides
        if ".." in text[5:].split("/") or any(c < " " or c == "\x7f" for c in text):
            raise DirectoryNotAllowedError(param, text, text, roots)
        url = text.rstrip("/")
        for root in roots:
            if root.startswith("s3://") and (url == root or url.startswith(root + "/")):
                return url
        raise DirectoryNotAllowedError(param, text, text, roots)
    if (not os.path.isabs(text) or ".." in text.split("/")
            or any(c < " " or c == "\x7f" for c in text)):
        raise DirectoryNotAllowedError(param, text, text, roots)
    resolved = resolved_path(text)
    for root in roots:
        if root.startswith("s3://"):
            continue
        real_root = resolved_path(root)
        if resolved == real_root or resolved.startswith(real_root.rstrip("/") + "/"):
            return resolved
    raise DirectoryNotAllowedError(param, text, resolved, roots)


def check_run_params(
    params: Mapping[str, Any],
    schemas: Mapping[str, Param],
    directories: Mapping[str, Iterable[str] | Callable[[], Iterable[str]]] | None = None,
) -> None:
    """Check a run's params again in the worker, before anything starts: each value against
    the DAG author's :class:`Param` in ``schemas`` (the DAG file's own dict, so a loosened
    serialized DAG changes nothing) and each directory param in ``directories``
    (``{param: roots}``, roots or a callable returning them, called here) with
    :func:`check_directory`. Raises ``ValueError`` naming the param."""
    import jsonschema

    for name, param in schemas.items():
        value = params.get(name, param.value if param.has_value else None)
        try:
            jsonschema.validate(value, param.schema, format_checker=jsonschema.FormatChecker())
        except jsonschema.ValidationError as exc:
            raise ValueError(f"param {name!r}: value {value!r} is not allowed: {exc.message}"
                             ) from None
    for name, roots in (directories or {}).items():
        check_directory(name, params.get(name), roots() if callable(roots) else roots)


#: the example pipelines (``airflow_checkpoint_provider.examples``)
EXAMPLES = "airflow_checkpoint_provider.examples"
#: the bundled example DAGs (``dags/``): one family of workflows on the same jobs -- the
#: upgrade DAG upgrades what the scheduled-savepoints DAG saves, blue-green cuts over what
#: either started -- so each allows the others' jobs (``allowed_owner_dags``, in code: a
#: run's conf cannot widen it). A job of any other DAG stays out of their reach.
EXAMPLE_DAGS = ("blue_green_upgrade", "checkpoint_freshness", "checkpointed_batch",
                "on_committed_checkpoint", "on_new_savepoint", "postgres_cdc",
                "savepoint_upgrade_restore", "savepoint_upgrade_standby", "scheduled_savepoints")
#: ``default_args`` of the example DAGs: every operator and sensor of this provider in them
#: may act on the jobs of the example family
EXAMPLE_DEFAULT_ARGS = {"allowed_owner_dags": EXAMPLE_DAGS}
#: the Airflow connections a run may choose for the example's PostgreSQL sinks
EXAMPLE_SINK_CONNECTIONS = ("example_pg",)


#: comma-separated table names (``schema.table`` allowed)
TABLES_PATTERN = (
    r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?"
    r"( ?, ?[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?)*$" + _END
)
#: the example pipelines' options a DAG run's conf may set, with the author's bounds: no
#: directory (``CKPT_EXAMPLE_DIR`` is the worker's, set by the deployment) and no URL
#: (``CKPT_EXAMPLE_PG_URL`` comes from a connection: ``env_from_connections``)
EXAMPLE_ENV: dict[str, dict[str, Any]] = {
    # one directory name under the worker's $CKPT_EXAMPLE_DIR (a run's own directory)
    "CKPT_EXAMPLE_WORKSPACE": env_pattern(WORKSPACE_PATTERN[:-1] + _END, max_length=64),
    "CKPT_EXAMPLE_RECORDS": env_integer(1, 10_000_000),
    "CKPT_EXAMPLE_KEYS": env_integer(1, 100_000),
    "CKPT_EXAMPLE_RATE": env_number(0, 100_000, exclusive_minimum=True),
    "CKPT_EXAMPLE_PARALLELISM": env_integer(1, 4),
    "CKPT_EXAMPLE_INTERVAL_MS": env_integer(100, 86_400_000),
    "CKPT_EXAMPLE_FAIL_AT": env_integer(1, 10_000_000),
    "CKPT_EXAMPLE_FAIL_AFTER_S": env_number(0, 3_600),
    "CKPT_EXAMPLE_FAIL_EVERY_S": env_number(0, 3_600, exclusive_minimum=True),
    "CKPT_EXAMPLE_SLOW_MS": env_number(0, 10_000),
    "CKPT_EXAMPLE_PG_TABLES": env_pattern(TABLES_PATTERN),
}
#: the CDC example's options a conf may set (``CKPT_CDC_URL`` comes from a connection)
CDC_ENV: dict[str, dict[str, Any]] = {"CKPT_CDC_TABLES": env_pattern(TABLES_PATTERN)}
