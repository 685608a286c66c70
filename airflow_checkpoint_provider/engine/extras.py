"""Optional parts of the package and the error when one is missing.

RocksDB state (rocksdict), S3 storage (boto3) and the checkpoint report's charts
(matplotlib) are extras, so that ``pip install airflow-checkpoint-provider`` stays light::

    pip install 'airflow-checkpoint-provider[rocksdb,s3,report]'   # or [all]
"""

from __future__ import annotations

import importlib
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
