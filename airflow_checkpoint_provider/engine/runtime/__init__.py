"""The runtime: what runs in a slot process.

* process hosting (this package's own modules): :mod:`.slot`, :mod:`.forkserver`,
  :mod:`.auth`, :mod:`.environment`, :mod:`.channels`, :mod:`.failure_place`, :mod:`.batches`;
* :mod:`.task` -- the task loop and its checkpointing, barrier alignment, mailbox and flow
  control;
* :mod:`.operators` -- the operators, declared in one registry
  (:mod:`.operators.registry`: spec type, state layout, restore compatibility).

The operator and task modules lived directly in this package before issue 53: their old
paths (``runtime.windowing``, ``runtime.mailbox``, ``runtime.vectorized_ops.latest``, ...)
still import, as the same module objects, with a :class:`DeprecationWarning` naming the new
path (:class:`_MovedModules`).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType

#: old module name (in this package) -> its module now (relative to this package)
MOVED = {
    "edge_operators": "operators.edges",
    "timers": "operators.timers",
    "watermarks": "operators.watermarks",
    "changelog_agg": "operators.changelog_agg",
    "windowing": "operators.windowing",
    "sessions": "operators.sessions",
    "topn": "operators.topn",
    "distinct": "operators.distinct",
    "broadcast": "operators.broadcast",
    "upsert_materializer": "operators.upsert_materializer",
    "factory": "operators.registry",
    "joins": "operators.joins.per_record",
    "join_state": "operators.joins.state",
    "regular_join": "operators.joins.regular",
    "temporal_join": "operators.joins.temporal",
    "vector_joins": "operators.joins.vectorized",
    "vectorized_ops": "operators.vectorized",
    "task_checkpoint": "task.checkpointing",
    "alignment": "task.alignment",
    "mailbox": "task.mailbox",
    "debloat": "task.debloat",
}


def _new_name(fullname: str) -> str | None:
    """The module now at the old path ``fullname`` (a moved module or a module inside a
    moved package), or ``None``."""
    if not fullname.startswith(__name__ + "."):
        return None
    rest = fullname[len(__name__) + 1:]
    head, dot, tail = rest.partition(".")
    if head not in MOVED:
        return None
    return f"{__name__}.{MOVED[head]}{dot}{tail}"


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports ``runtime.<old>`` as the module at its new path (the same module object, so
    classes stay identical and pickles of the old path load), with a deprecation warning."""

    def find_spec(self, fullname: str, path: object = None, target: object = None
                  ) -> importlib.machinery.ModuleSpec | None:
        if _new_name(fullname) is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = _new_name(spec.name)
        assert new is not None
        warnings.warn(f"{spec.name} is deprecated: import from {new}", DeprecationWarning,
                      stacklevel=2)
        return importlib.import_module(new)

    def exec_module(self, module: ModuleType) -> None:
        """The module is already executed (under its new name)."""


if not any(isinstance(f, _MovedModules) for f in sys.meta_path):
    # first: the path finder would find a moved package's files again under the old name
    sys.meta_path.insert(0, _MovedModules())
