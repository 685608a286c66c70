"""Example pipelines (the bundled DAGs start them): options from ``CKPT_EXAMPLE_*``."""

from __future__ import annotations

import os
import re

#: a workspace is one directory name under the example root (no path: a run's conf sets it)
WORKSPACE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"


def example_root(root: str | None = None) -> str:
    """Where an example job keeps checkpoints, savepoints and output: ``root`` if given,
    else ``$CKPT_EXAMPLE_DIR`` (the deployment's, default ``./demo-output``; read here, as
    a pipeline reads its own options: this runs on Spark executors too, where the provider's
    settings module and its engine client, with SQLAlchemy, may not be installed), in the
    subdirectory ``$CKPT_EXAMPLE_WORKSPACE`` if that is set. A DAG run's conf may choose
    the workspace (a name, never a path), so each run can have its own directory under the
    author's root."""
    if root:
        return os.path.abspath(root)
    base = os.path.abspath(os.environ.get("CKPT_EXAMPLE_DIR") or "demo-output")
    workspace = os.environ.get("CKPT_EXAMPLE_WORKSPACE", "")
    if not workspace:
        return base
    if not re.fullmatch(WORKSPACE_PATTERN[1:-1], workspace):
        raise ValueError(f"CKPT_EXAMPLE_WORKSPACE {workspace!r} must be one directory name "
                         f"matching {WORKSPACE_PATTERN}")
    return os.path.join(base, workspace)
