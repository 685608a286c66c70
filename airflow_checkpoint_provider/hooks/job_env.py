"""Which environment variables a job may be given from outside (``env_vars``).

A job's environment reaches ``bash`` (spark-submit is a bash script), the JVM, the Python
interpreter of the driver and the executors, and libraries they load. Many variables make
one of them run code: ``BASH_ENV``/``ENV`` (a file bash sources), ``LD_PRELOAD`` (a library
the loader maps), ``PYTHONSTARTUP``/``PYTHONPATH``/``PYTHONWARNINGS`` (Python imports a
module), ``BROWSER`` (``webbrowser`` runs it), ``JAVA_TOOL_OPTIONS`` (``-javaagent``),
``SPARK_CONF_DIR`` (``spark-env.sh`` is sourced), ``OPENSSL_CONF`` (engines are loaded), ...
A DAG run's conf is untrusted (Airflow's security model: DAG authors are trusted, users who
may trigger a DAG are not), so :func:`check_job_env` refuses these variables whoever passes
them -- the hook, the operators, a DAG -- with :class:`UnsafeJobEnvironmentError` naming the
variable. The job's interpreter and Spark settings are the deployment's: set them in the
worker's own environment or in the Spark connection, not per job.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from airflow_checkpoint_provider.engine.client import (
    ALLOWED_SAVEPOINT_ROOTS,
    METADATA_URL_ENV,
    SHIP_CODE_ENV,
    SNAPSHOT_HMAC_KEY,
)

#: refused by exact name
FORBIDDEN_NAMES = frozenset(
    {
        # shells: sourced files, exported functions, word splitting, prompts
        "BASH_ENV",
        "ENV",
        "ZDOTDIR",
        "SHELLOPTS",
        "BASHOPTS",
        "IFS",
        "PS4",
        "PROMPT_COMMAND",
        "CDPATH",
        "GLOBIGNORE",
        "SHELL",
        # which programs run and where from
        "PATH",
        "HOME",
        "TMPDIR",
        "JAVA_HOME",
        "CLASSPATH",
        "BROWSER",
        # JVM options (-javaagent, -XX:OnError=...)
        "JAVA_TOOL_OPTIONS",
        "_JAVA_OPTIONS",
        "JDK_JAVA_OPTIONS",
        # C library / OpenSSL / other interpreters' loaders
        "GLIBC_TUNABLES",
        "GCONV_PATH",
        "HOSTALIASES",
        "LOCALDOMAIN",
        "RES_OPTIONS",
        "NLSPATH",
        "OPENSSL_CONF",
        "OPENSSL_ENGINES",
        "OPENSSL_MODULES",
        "PERL5OPT",
        "PERL5LIB",
        "PERLLIB",
        "RUBYOPT",
        "RUBYLIB",
        "NODE_OPTIONS",
        "NODE_PATH",
        # AWS SDK: a config file's credential_process runs a command
        "AWS_CONFIG_FILE",
        "AWS_SHARED_CREDENTIALS_FILE",
        # YARN / Hadoop configuration directories (classes, scripts)
        "HADOOP_CONF_DIR",
        "YARN_CONF_DIR",
        "HADOOP_HOME",
        "HADOOP_OPTS",
        "HADOOP_CLASSPATH",
        "HADOOP_USER_CLASSPATH_FIRST",
        # the engine's own: where the job writes, which snapshots it trusts (set by the hook
        # from the deployment, never by a caller)
        METADATA_URL_ENV,
        SNAPSHOT_HMAC_KEY.name,
        ALLOWED_SAVEPOINT_ROOTS.name,
        SHIP_CODE_ENV,
    }
)

#: refused by prefix (loader, interpreter and Spark launcher families)
FORBIDDEN_PREFIXES = (
    "LD_",
    "DYLD_",
    "PYTHON",
    "PYSPARK_",
    "BASH_FUNC_",
    "SPARK_",
    "JAVA_",
    "MALLOC_",
    "KRB5",
    "HADOOP_",
    "YARN_",
)

#: ``SPARK_*`` variables that only name an address (no code): allowed
ALLOWED_SPARK = frozenset({"SPARK_LOCAL_IP", "SPARK_LOCAL_HOSTNAME", "SPARK_PUBLIC_DNS"})

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
MAX_VALUE_LENGTH = 8192


class UnsafeJobEnvironmentError(ValueError):
    """An environment variable a job must not be given (it loads or runs code, or it is
    the deployment's). ``.variable`` names it."""

    def __init__(self, variable: str, reason: str) -> None:
        self.variable = variable
        super().__init__(
            f"environment variable {variable!r} is not allowed in a job's env_vars: {reason}"
        )


def forbidden_reason(name: str) -> str | None:
    """Why ``name`` may not be passed to a job, or ``None`` if it may."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        return "a variable name is 1 to 128 characters of A-Z a-z 0-9 _, not starting with a digit"
    upper = name.upper()
    if upper in ALLOWED_SPARK:
        return None
    if upper in FORBIDDEN_NAMES:
        return (
            "it makes a shell, loader or interpreter run code, or it is set by the deployment"
            if not upper.startswith("CKPT_")
            else "it is the deployment's setting, set by the hook, never per job"
        )
    for prefix in FORBIDDEN_PREFIXES:
        if upper.startswith(prefix):
            return (
                f"variables starting with {prefix} configure a loader, an interpreter or "
                f"the Spark launcher (they can make the job run other code)"
            )
    return None


def check_job_env(env: Mapping[str, object] | None) -> dict[str, str]:
    """``env`` as a ``{str: str}`` dict, or :class:`UnsafeJobEnvironmentError` naming the
    first variable that is refused (see :data:`FORBIDDEN_NAMES`, :data:`FORBIDDEN_PREFIXES`)."""
    out: dict[str, str] = {}
    for name, value in (env or {}).items():
        reason = forbidden_reason(name)
        if reason is not None:
            raise UnsafeJobEnvironmentError(str(name), reason)
        text = str(value)
        if "\x00" in text or len(text) > MAX_VALUE_LENGTH:
            raise UnsafeJobEnvironmentError(
                name, f"its value must be at most {MAX_VALUE_LENGTH} characters without NUL"
            )
        out[name] = text
    return out


# -- values: what a DAG run's conf may choose -----------------------------------------------
#
# A DAG run's conf is untrusted input: it may choose among values the DAG author fixed in
# code, it never names a host, a credential, a path or code. The names above are checked for
# everyone; the *values* of variables that come from a conf are checked against the
# author's per-variable JSON schemas (``airflow_checkpoint_provider.params``: enum, pattern,
# number bounds), and external systems are Airflow connections the author lists
# (:func:`connection_env`), resolved in the worker -- never a URL from a conf.


class JobEnvironmentValueError(UnsafeJobEnvironmentError):
    """A variable's value is not one the DAG author allows (``.variable`` names it)."""

    def __init__(self, variable: str, reason: str) -> None:
        self.variable = variable
        ValueError.__init__(self, f"environment variable {variable!r} {reason}")


def check_env_values(env: Mapping[str, object] | None,
                     schemas: Mapping[str, Mapping[str, object]]) -> dict[str, str]:
    """``env`` as ``{str: str}`` after checking each variable against the DAG author's
    per-variable JSON schema in ``schemas``: a variable without a schema, or a value its
    schema refuses (a path, a URL, 128 slot processes ...), raises
    :class:`JobEnvironmentValueError` naming the variable, the value and the rule. Numbers are
    passed as their decimal text (an integral float of an ``integer`` schema as an int)."""
    import jsonschema

    out: dict[str, str] = {}
    for name, value in check_job_env_names(env).items():
        schema = schemas.get(name)
        if schema is None:
            raise JobEnvironmentValueError(
                name, f"may not be set here (allowed: {', '.join(sorted(schemas)) or 'none'})")
        if isinstance(value, bool):
            raise JobEnvironmentValueError(name, f"must not be a boolean ({value!r})")
        try:
            jsonschema.validate(value, dict(schema))
        except jsonschema.ValidationError as exc:
            raise JobEnvironmentValueError(
                name, f"value {value!r} is not allowed: {exc.message} (rule: {_rule(schema)})"
            ) from None
        if isinstance(value, float) and value.is_integer() and _is_integer_schema(schema):
            value = int(value)
        out[name] = str(value)
    return check_job_env(out)


def check_job_env_names(env: Mapping[str, object] | None) -> dict[str, object]:
    """``env`` unchanged (values untouched) once every name passed :func:`forbidden_reason`."""
    for name in env or {}:
        reason = forbidden_reason(name)
        if reason is not None:
            raise UnsafeJobEnvironmentError(str(name), reason)
    return dict(env or {})


def _is_integer_schema(schema: Mapping[str, object]) -> bool:
    kind = schema.get("type")
    return kind == "integer" or (isinstance(kind, list) and "integer" in kind
                                 and "number" not in kind)


def _rule(schema: Mapping[str, object]) -> str:
    keys = ("type", "enum", "pattern", "minimum", "maximum", "exclusiveMinimum",
            "exclusiveMaximum", "maxLength")
    return ", ".join(f"{k}={schema[k]!r}" for k in keys if k in schema)


class ConnectionNotAllowedError(ValueError):
    """A connection id the DAG author did not list (``.variable`` and ``.conn_id`` name it)."""

    def __init__(self, variable: str, conn_id: object, allowed: tuple[str, ...]) -> None:
        self.variable = variable
        self.conn_id = conn_id
        super().__init__(
            f"environment variable {variable!r}: connection id {conn_id!r} is not one this "
            f"task may use (allowed_connections: {', '.join(allowed) or 'none'})")


def connection_env(env_from_connections: Mapping[str, object] | None,
                   allowed_connections: tuple[str, ...] | list[str] | None) -> dict[str, str]:
    """``{variable: URI}`` of the Airflow connections ``env_from_connections`` names
    (``{variable: conn_id}``, conn ids usually templated from a DAG param), resolved in the
    worker through ``airflow.sdk``'s ``BaseHook.get_connection(...).get_uri()``.

    Every conn id must be in ``allowed_connections`` (the DAG author's list, fixed in code):
    a rendered id outside it raises :class:`ConnectionNotAllowedError` before any lookup,
    even if the DAG's params were loosened; an id rendered empty (``None``) sets nothing. Each URI (and its password) is registered with
    Airflow's secret masker: it goes to the job's environment, never to argv or a log.
    ``postgres://`` (Airflow's scheme of a ``postgres`` connection) becomes ``postgresql://``.
    """
    if not env_from_connections:
        return {}
    allowed = tuple(allowed_connections or ())
    # a variable whose id renders empty (an optional connection param left null) is not set
    names = {k: v for k, v in check_job_env_names(env_from_connections).items()
             if v not in (None, "", "None")}
    for variable, conn_id in names.items():  # all checked before any lookup
        if not isinstance(conn_id, str) or conn_id not in allowed:
            raise ConnectionNotAllowedError(variable, conn_id, allowed)
    from airflow.sdk import BaseHook

    from airflow_checkpoint_provider.hooks.secrets import mask_url_secrets

    out: dict[str, str] = {}
    for variable, conn_id in names.items():
        uri = BaseHook.get_connection(str(conn_id)).get_uri()
        if uri.startswith("postgres://"):
            uri = "postgresql://" + uri[len("postgres://"):]
        mask_url_secrets(uri)
        out[variable] = uri
    return check_job_env(out)


def as_mapping(value: object, what: str) -> dict | None:
    """A templated dict; rendered as text (a DAG without ``render_template_as_native_obj``)
    it is parsed as JSON or a Python literal."""
    import ast
    import json

    if value is None or isinstance(value, dict):
        return value  # type: ignore[return-value]
    text = str(value).strip()
    if text in ("", "None"):
        return None
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = ast.literal_eval(text)
    if not isinstance(parsed, dict):
        raise ValueError(f"{what} must be a mapping, not {value!r}")
    return parsed


def pipeline_env(env_vars: object, *, env_schema: Mapping[str, Mapping[str, object]] | None,
                 env_from_connections: object, allowed_connections: tuple[str, ...] | list[str],
                 ) -> dict[str, str]:
    """The environment a pipeline is built or run with, from an operator's (templated, so
    possibly conf-chosen) arguments: ``env_vars`` checked by name (:func:`check_job_env`) and,
    when the DAG author gave ``env_schema``, by value (:func:`check_env_values`); plus the URI
    of each Airflow connection ``env_from_connections`` names, each id one of the author's
    ``allowed_connections`` (:func:`connection_env`). A variable may not come from both. Every
    operator that builds or runs the pipeline (submit, verify, rollback guard, CDC slot copy)
    uses this one function, so all of them see the same sinks and sources."""
    raw = as_mapping(env_vars, "env_vars")
    # values checked as given (a JSON number is a number), names by the rules of check_job_env
    env = check_job_env(raw if env_schema is None else check_env_values(raw, env_schema))
    from_conns = as_mapping(env_from_connections, "env_from_connections") or {}
    for name in sorted(set(env) & set(from_conns)):
        raise JobEnvironmentValueError(
            name, "comes from a connection (env_from_connections), not from env_vars")
    return {**env, **connection_env(from_conns, allowed_connections)}
