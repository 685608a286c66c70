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
  (the options the pipelines read), string values; never a free mapping;
* :func:`directory_param` -- empty or an absolute path without ``..`` components (the
  engine also confines savepoints to ``$CKPT_ALLOWED_SAVEPOINT_ROOTS``).

The submit hook refuses interpreter and loader variables on its own
(:mod:`airflow_checkpoint_provider.hooks.job_env`), whoever passes them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from airflow.sdk import Param

from airflow_checkpoint_provider.engine.client import MAX_NAME_LENGTH

# ``$`` of Python's ``re`` (jsonschema uses re.search) also matches before a trailing
# newline; ``(?![\s\S])`` matches only at the true end, in Python and in the UI's JavaScript
_END = r"(?![\s\S])"
#: a job name (the engine's rule, engine/names.py)
JOB_NAME_PATTERN = rf"^(?!.*\.\.)[A-Za-z0-9][A-Za-z0-9._-]{{0,{MAX_NAME_LENGTH - 1}}}$" + _END
#: ``module.path:function``
PIPELINE_PATTERN = (
    r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$" + _END
)
#: empty, or an absolute path of printable characters without a ``..`` component
DIRECTORY_PATTERN = r"^(?!.*(^|/)\.\.(/|$))(/[^\x00-\x1f\x7f]*)?$" + _END
MAX_ENV_VALUE = 4096


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
    default: Mapping[str, str], allowed: Iterable[str], description: str = ""
) -> Param:
    """An environment of the job holding only the variables in ``allowed`` (string values)."""
    allowed = sorted(set(allowed))
    unknown = set(default) - set(allowed)
    if unknown:
        raise ValueError(f"default job_env names {sorted(unknown)} not in the allowlist")
    schema: dict[str, Any] = {
        "type": "object",
        "propertyNames": {"enum": allowed},
        "additionalProperties": {
            "type": "string",
            "maxLength": MAX_ENV_VALUE,
            "pattern": r"^[^\x00]*$",
        },
    }
    return Param(
        dict(default),
        **schema,
        description=description or f"environment of the job: only {', '.join(allowed)}",
    )


def directory_param(description: str) -> Param:
    return Param(
        "", type="string", maxLength=4096, pattern=DIRECTORY_PATTERN, description=description
    )


#: the example pipelines (``airflow_checkpoint_provider.examples``)
EXAMPLES = "airflow_checkpoint_provider.examples"
#: what the example pipelines read from their environment
EXAMPLE_ENV = (
    "CKPT_EXAMPLE_DIR",
    "CKPT_EXAMPLE_RECORDS",
    "CKPT_EXAMPLE_KEYS",
    "CKPT_EXAMPLE_RATE",
    "CKPT_EXAMPLE_PARALLELISM",
    "CKPT_EXAMPLE_INTERVAL_MS",
    "CKPT_EXAMPLE_FAIL_AT",
    "CKPT_EXAMPLE_FAIL_AFTER_S",
    "CKPT_EXAMPLE_FAIL_EVERY_S",
    "CKPT_EXAMPLE_SLOW_MS",
    "CKPT_EXAMPLE_PG_URL",
    "CKPT_EXAMPLE_PG_TABLES",
)
