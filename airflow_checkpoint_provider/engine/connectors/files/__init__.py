"""The file connectors: :class:`~.sink.FileSink` (exactly-once part files, :mod:`.sink`)
and :class:`~.source.FileSource` (:mod:`.source`), with their readers, restore, clean-ups,
output modes and partition directories; their exceptions in :mod:`.errors`.

Until issue 53 this path was the module of the file sink: a name read from the package
itself (``from ...connectors.files import FileSink``) still works, with a
:class:`DeprecationWarning` naming ``files.sink``.
"""

from ..deprecated import moved

__getattr__ = moved(__name__, "files.sink")
