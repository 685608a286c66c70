"""The ``ckpt`` command.

``--json`` output is stable: documented in README.md ("CLI"), keys are only ever added.
The metadata DB comes from ``--db`` or ``$CKPT_METADATA_URL``, else
``./checkpoints/metadata.db`` (the default of a Pipeline whose checkpoint directory is
``checkpoints``).

Verbs by group: :mod:`.jobs` (run, list and control jobs), :mod:`.snapshots` (checkpoint
and savepoint history, inspection, retention, pins), :mod:`.state` (``ckpt state``) and
:mod:`.db` (``ckpt db``), :mod:`.cdc` (``ckpt cdc``); :mod:`.common` holds the ``main`` group they register with.
"""

from __future__ import annotations

from . import cdc, db, jobs, sinks, snapshots, state  # noqa: F401 - importing registers their verbs
from .common import load_pipeline, main
from .jobs import apply_overrides

__all__ = ["apply_overrides", "load_pipeline", "main"]
