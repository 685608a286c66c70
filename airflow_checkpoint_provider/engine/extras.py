"""Optional parts of the package and the error when one is missing; old import paths of
modules that moved inside the package (:func:`alias_moved_modules`).

RocksDB state (rocksdict), S3 storage (boto3) and the checkpoint report's charts
(matplotlib) are extras, so that ``pip install airflow-checkpoint-provider`` stays light::

    pip install 'airflow-checkpoint-provider[rocksdb,s3,report]'   # or [all]
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType

from .errors import ConfigurationError

#: extra -> (module to import, what needs it)
EXTRAS = {
    "rocksdb": ("rocksdict", "state_backend='rocksdb'"),
    "s3": ("boto3", "s3:// checkpoint storage"),
    "report": ("matplotlib", "the checkpoint report"),
    "postgres": ("psycopg", "PostgresSink and a PostgreSQL metadata DB"),
    "delta": ("deltalake", "DeltaSink"),
    "iceberg": ("pyiceberg", "IcebergSink"),
    "kafka": ("confluent_kafka", "KafkaSource and KafkaSink"),
}


class MissingExtraError(ConfigurationError, ImportError):
    """An optional dependency is not installed; the message says which extra brings it."""


def require(extra: str) -> ModuleType:
    """Import the module of ``extra``, or raise :class:`MissingExtraError` naming the extra."""
    module, purpose = EXTRAS[extra]
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(
            f"{purpose} needs the Python package {module!r}, which is not installed: "
            f"pip install 'airflow-checkpoint-provider[{extra}]'") from exc


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports ``<package>.<old>`` (and modules inside an old package path) as the module at
    its new path: the same module object, so classes stay identical and pickles of the old
    path load, with a deprecation warning naming the new path."""

    def __init__(self, package: str, moved: dict[str, str]) -> None:
        self.package, self.moved = package, moved
        #: new module name -> its own spec, while the import system replaces it (below)
        self.specs: dict[str, importlib.machinery.ModuleSpec | None] = {}

    def new_name(self, fullname: str) -> str | None:
        if not fullname.startswith(self.package + "."):
            return None
        head, dot, tail = fullname[len(self.package) + 1:].partition(".")
        if head not in self.moved:
            return None
        return f"{self.package}.{self.moved[head]}{dot}{tail}"

    def find_spec(self, fullname: str, path: object = None, target: object = None
                  ) -> importlib.machinery.ModuleSpec | None:
        if self.new_name(fullname) is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = self.new_name(spec.name)
        assert new is not None
        warnings.warn(f"{spec.name} is deprecated: import from {new}", DeprecationWarning,
                      stacklevel=2)
        module = importlib.import_module(new)
        self.specs[module.__name__] = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        """The module is already executed (under its new name). The import system set its
        ``__spec__`` to the old path's: give it its own back (``importlib.reload``, tools
        that read the spec)."""
        module.__spec__ = self.specs.pop(module.__name__, module.__spec__)


def alias_moved_modules(package: str, moved: dict[str, str]) -> None:
    """Keep the old paths of ``package``'s moved modules importable (``moved``: old module
    name in the package -> its path now, relative to the package). First on ``sys.meta_path``:
    the path finder would find a moved package's files again under the old name."""
    if not any(isinstance(f, _MovedModules) and f.package == package for f in sys.meta_path):
        sys.meta_path.insert(0, _MovedModules(package, moved))
