"""Keyed and operator state.

* :mod:`.interface` -- what a per-key state offers user functions (value, list, map,
  reducing), one protocol per kind, whichever backend keeps it;
* :mod:`.backend` -- what every keyed state backend does for checkpoints;
* a package per backend: :mod:`.heap` (Python dicts) and :mod:`.rocksdb`; the columnar
  state of the vectorized operators in :mod:`.columnar`;
* shared machinery: :mod:`.descriptors`, :mod:`.keygroups`, :mod:`.keys`, :mod:`.ttl`,
  :mod:`.contract`, :mod:`.key_hashing` (the key hash, key group and channel of whole Arrow arrays),
  :mod:`.operator_state`.

The columnar modules lived directly in this package before issue 53: their old paths
(``state.windows``, ``state.key_index``, ...) still import, as does ``state.vectorized``
(now :mod:`.key_hashing`), with a
:class:`DeprecationWarning` naming the new one (:func:`~..extras.alias_moved_modules`).
"""

from __future__ import annotations

from ..extras import alias_moved_modules

#: old module name (in this package) -> its module now
MOVED = {name: f"columnar.{name}" for name in (
    "key_index", "distinct_state", "session_state", "topn_state", "topn_snapshot", "windows",
    "join_buffers")}
MOVED["vectorized"] = "key_hashing"


alias_moved_modules(__name__, MOVED)
