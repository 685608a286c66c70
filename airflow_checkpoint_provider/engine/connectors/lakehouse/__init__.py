"""The lakehouse connectors: :class:`~.delta.DeltaSink`, :class:`~.iceberg.IcebergSink`
(both on the epoch protocol of :mod:`.staged`) and the table sources of
:mod:`.table_source`; their exceptions in :mod:`.errors`.

Until issue 53 this path was the module of the staged-table protocol: a name read from the
package itself still works, with a :class:`DeprecationWarning` naming ``lakehouse.staged``.
"""

from ..deprecated import moved

__getattr__ = moved(__name__, "lakehouse.staged")
