"""The heap snapshot file format: one msgpack object per non-empty key group.

A full file (and a changelog base) is a sequence of ``[key_group, {state: {key: value}},
2]`` chunks in the typed encoding of :mod:`...typed_codec` (format version 2); the handle
records each key group's byte offset and length and the file's SHA-256. Version 1 chunks
(plain msgpack, ``[key_group, {state: [[key, value], ...]}]``) restore as before. A delta of
an incremental snapshot adds patch chunks (:mod:`.changelog`).
"""

from __future__ import annotations

from ...errors import CorruptCheckpointError
from ...typed_codec import FORMAT_VERSION, unpack_value


def decode_chunk(chunk: bytes | memoryview, operator_uid: str) -> tuple[int, dict[str, dict]]:
    """``(key_group, {state: {key: value}})`` of one key-group chunk of a heap snapshot file,
    version 2 (typed) or 1 (plain msgpack: list keys become tuples, as they always did)."""
    try:
        decoded = unpack_value(chunk)
    except (ValueError, TypeError) as exc:  # msgspec.DecodeError (a ValueError)
        raise CorruptCheckpointError(
            f"operator {operator_uid!r}: a heap state chunk cannot be decoded ({exc})") from exc
    if isinstance(decoded, list) and len(decoded) == 3 and decoded[2] == FORMAT_VERSION \
            and isinstance(decoded[1], dict):
        return decoded[0], decoded[1]
    if isinstance(decoded, list) and len(decoded) == 2 and isinstance(decoded[1], dict):
        return decoded[0], {name: {tuple(k) if isinstance(k, list) else k: v for k, v in items}
                            for name, items in decoded[1].items()}
    raise CorruptCheckpointError(
        f"operator {operator_uid!r}: a heap state chunk is not [key group, states] (format "
        f"version 1) or [key group, states, {FORMAT_VERSION}]")
