"""Keyed and operator state.

* :mod:`.interface` -- what a per-key state offers user functions (value, list, map,
  reducing), one protocol per kind, whichever backend keeps it;
* :mod:`.backend` -- what every keyed state backend does for checkpoints;
* a package per backend: :mod:`.heap` (Python dicts) and :mod:`.rocksdb`; the columnar
  state of the vectorized operators in :mod:`.columnar`;
* shared machinery: :mod:`.descriptors`, :mod:`.keygroups`, :mod:`.keys`, :mod:`.ttl`,
  :mod:`.contract`, :mod:`.vectorized` (key hashing), :mod:`.operator_state`.

The columnar modules lived directly in this package before issue 53: their old paths
(``state.windows``, ``state.key_index``, ...) still import, with a
:class:`DeprecationWarning` naming the new one (:class:`_MovedModules`).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType

#: old module name (in this package) -> its module now
MOVED = {name: f"columnar.{name}" for name in (
    "key_index", "distinct_state", "session_state", "topn_state", "topn_snapshot", "windows",
    "join_buffers")}


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports ``state.<old>`` as the module at its new path (the same module object, so
    classes stay identical and pickles of the old path load), with a deprecation warning."""

    def find_spec(self, fullname: str, path: object = None, target: object = None
                  ) -> importlib.machinery.ModuleSpec | None:
        package, _, name = fullname.rpartition(".")
        if package != __name__ or name not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = f"{__name__}.{MOVED[spec.name.rpartition('.')[2]]}"
        warnings.warn(f"{spec.name} is deprecated: import from {new}", DeprecationWarning,
                      stacklevel=2)
        return importlib.import_module(new)

    def exec_module(self, module: ModuleType) -> None:
        """The module is already executed (under its new name)."""


if not any(isinstance(f, _MovedModules) for f in sys.meta_path):
    sys.meta_path.append(_MovedModules())
