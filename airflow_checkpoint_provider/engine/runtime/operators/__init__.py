"""The operators: what a task runs for each node of its chain.

* :mod:`.registry` -- the one registry: for each node kind, the operator, the type of its
  spec, its state layout and the state names it owns; restore compatibility and
  :func:`~.registry.open_operator`;
* :mod:`.base` -- the operator base classes and the per-record ones (map, filter, process,
  reduce, aggregate); :mod:`.edges` -- sources and two-phase-commit sinks;
* windows and their kin: :mod:`.windowing`, :mod:`.sessions`, :mod:`.topn`,
  :mod:`.distinct`, :mod:`.changelog_agg`, :mod:`.upsert_materializer`, :mod:`.broadcast`;
* :mod:`.joins` -- co-process, interval, window, regular and temporal joins;
  :mod:`.vectorized` -- the vectorized operators of ``engine.vectorized_ops``;
* what operators share: :mod:`.timers`, :mod:`.watermarks`.

Before issue 53 this path was a module (now :mod:`.base`): its names still read from here,
with a :class:`DeprecationWarning`.
"""

from __future__ import annotations

import importlib
import warnings


def __getattr__(name: str) -> object:
    if name.startswith("__"):
        raise AttributeError(name)
    base = importlib.import_module(f"{__name__}.base")
    if not hasattr(base, name):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(f"{__name__}.{name} is deprecated: import {name} from {base.__name__}",
                  DeprecationWarning, stacklevel=2)
    value = getattr(base, name)
    globals()[name] = value  # one warning per name
    return value
