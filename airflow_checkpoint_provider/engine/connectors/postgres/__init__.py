"""The PostgreSQL connectors: :class:`~.sink.PostgresSink` (prepared transactions or
upserts, :mod:`.sink`, its lock handling in :mod:`.locks`) and the change-data-capture
source of :mod:`.cdc`; the connection string in :mod:`.connection`, the exceptions in
:mod:`.errors`.

Until issue 53 this path was the module of the sink: a name read from the package itself
(``from ...connectors.postgres import PostgresSink``) still works, with a
:class:`DeprecationWarning` naming ``postgres.sink``.
"""

from ..deprecated import moved

__getattr__ = moved(__name__, "postgres.sink", renamed={"_dsn": "postgres.connection:libpq_dsn"})
