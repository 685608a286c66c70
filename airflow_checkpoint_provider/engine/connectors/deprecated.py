"""The module paths of the connectors before they moved into one package per family
(issue 53), kept as short shims.

``connectors.files``, ``connectors.postgres`` and ``connectors.lakehouse`` became packages
(their ``__init__`` is the shim); ``connectors.file_source``, ``connectors.delta``,
``connectors.iceberg``, ``connectors.table_source`` and ``connectors.postgres_cdc`` are shim
modules. A name read from a shim is looked up in the new modules and a
:class:`DeprecationWarning` names where to import it from. Unpickling an object pickled
under an old path (``pickle`` looks the class up with ``getattr`` on the module) still works.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Callable, Mapping

PACKAGE = __name__.rpartition(".")[0]



def moved(old: str, *new: str, renamed: Mapping[str, str] | None = None) -> Callable[[str], object]:
    """The module ``__getattr__`` of the shim at ``old`` (a full module path): a name is
    read from the first of the ``new`` modules (relative to ``engine.connectors``) that
    has it; ``renamed`` maps an old name to ``"module:name"`` where it lives now."""
    renamed = dict(renamed or {})

    def __getattr__(name: str) -> object:
        if name.startswith("__"):
            raise AttributeError(name)
        if name in renamed:
            module, _, new_name = renamed[name].partition(":")
            where = [(module, new_name)]
        else:
            where = [(module, name) for module in new]
        for module, attr in where:
            target = importlib.import_module(f"{PACKAGE}.{module}")
            if hasattr(target, attr):
                warnings.warn(
                    f"{old}.{name} is deprecated: import {attr} from {target.__name__}",
                    DeprecationWarning, stacklevel=2)
                value = getattr(target, attr)
                setattr(sys.modules[old], name, value)  # one warning per name
                return value
        raise AttributeError(f"module {old!r} has no attribute {name!r}")

    return __getattr__
