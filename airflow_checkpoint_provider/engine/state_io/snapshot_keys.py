"""Every key of a snapshot's keyed operator checked (``ckpt verify-restore``): keys that are no
keys, keys of a second type, keys outside the key group their hash gives. Apart from
:mod:`.keys` because it reads snapshots (:mod:`.read`), which :mod:`.keys` must not import."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..state.key_hashing import key_groups as arrow_key_groups
from ..state.keygroups import key_group_for
from ..state.keys import canonical_key
from .keys import (
    MAX_NAMED,
    KeyTypes,
    _entry_problem,
    arrow_key_kind,
    arrow_key_problem,
)
from .read import KEY, KEY_GROUP, iter_entries, read_arrow_rows


def snapshot_key_problems(keyed) -> tuple[str | None, list[tuple[str | None, str]]]:
    """The key type of the snapshot operator ``keyed`` (a
    :class:`~.read.KeyedOperatorState`) and its key problems as ``(state, reason)``: keys
    that are no keys, keys of a second type (a restore that changed the key type left the
    old keys' state behind), keys outside the key group their hash gives."""
    uid, maxp = keyed.uid, keyed.max_parallelism
    if keyed.columnar:
        rows = read_arrow_rows(keyed)
        keys = rows.column(KEY)
        problem = arrow_key_problem(keys, None)
        if problem is not None:
            return None, [(None, problem)]
        if not rows.num_rows or pa.types.is_null(keys.type):
            return None, []
        found = np.asarray(rows.column(KEY_GROUP).to_numpy(), dtype=np.int64)
        wrong = np.flatnonzero(arrow_key_groups(keys.combine_chunks(), maxp) != found)
        problems: list[tuple[str | None, str]] = [
            (None, f"key {keys[int(i)].as_py()!r} is stored in key group {found[int(i)]}, "
                   f"but its hash gives key group "
                   f"{key_group_for(keys[int(i)].as_py(), maxp)}: no job reads it")
            for i in wrong[:MAX_NAMED]]
        if len(wrong) > MAX_NAMED:
            problems.append((None, f"and {len(wrong) - MAX_NAMED} more keys in the wrong key "
                                   "group"))
        return arrow_key_kind(keys.type), problems
    types = KeyTypes()
    problems = []
    bad = 0
    for kg, state, key, _ in iter_entries(keyed):
        reason = _entry_problem(uid, kg, key, maxp)
        if reason is None:
            types.add(state, canonical_key(key, uid))
            continue
        bad += 1
        if bad <= MAX_NAMED:
            problems.append((state, reason))
    if bad > MAX_NAMED:
        problems.append((None, f"and {bad - MAX_NAMED} more keys no job can read back"))
    if len(types.examples) > 1:
        problems.append((None, f"its state has keys of {len(types.examples)} types: "
                               f"{types.describe()}; a job reads the keys of one type only, "
                               "the others' state is orphaned (a restore changed the key "
                               "type, or state was written with keys of another type); drop "
                               "the keys of the other types (ckpt state write --drop-key)"))
    return types.single, problems
