import mmh3
import numpy as np
import pyarrow as pa
import pytest

from airflow_checkpoint_provider.engine.state.key_hashing import (
    channels_for,
    key_groups,
    key_hashes,
    murmur3_32_fixed,
)
from airflow_checkpoint_provider.engine.state.keygroups import (
    key_group_for,
    key_hash,
    operator_index_for_key_group,
)

RNG_SEED = 20240611


def _expected(array):
    values = array.to_pylist()
    return np.array(
        [key_hash(tuple(v) if isinstance(v, list) else v) for v in values], dtype=np.uint32
    )


def _check(array):
    got = key_hashes(array)
    assert got.dtype == np.uint32
    assert got.shape == (len(array),)
    np.testing.assert_array_equal(got, _expected(array))
    return got


def _random_strings(rng, count, alphabet, max_len=40):
    lengths = rng.integers(0, max_len + 1, size=count)
    return ["".join(rng.choice(alphabet, size=int(n))) for n in lengths]


ASCII = list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 _-:/")
NON_ASCII = ASCII + list("éüßøñç€漢字かな😀🚀Ωж")


def test_pinned_single_string_matches_mmh3():
    assert int(key_hashes(pa.array(["a"]))[0]) == mmh3.hash(b"a", 0, signed=False)


def test_murmur3_32_fixed_matches_mmh3():
    rng = np.random.default_rng(RNG_SEED)
    for nwords in (0, 1, 2, 3, 7):
        words = rng.integers(0, 2**32, size=(20, nwords), dtype=np.uint32)
        expected = [mmh3.hash(row.astype("<u4").tobytes(), 0, signed=False) for row in words]
        np.testing.assert_array_equal(murmur3_32_fixed(words), np.array(expected, np.uint32))
    with pytest.raises(TypeError):
        murmur3_32_fixed(np.zeros((2, 2), dtype=np.int64))
    with pytest.raises(ValueError):
        murmur3_32_fixed(np.zeros(2, dtype=np.uint32))


def test_int64_random_and_extremes():
    rng = np.random.default_rng(RNG_SEED)
    values = rng.integers(-(2**63), 2**63 - 1, size=500, dtype=np.int64, endpoint=True).tolist()
    values += [0, 1, -1, 2**63 - 1, -(2**63), 2**31, -(2**31) - 1, 255, -256]
    _check(pa.array(values, pa.int64()))


@pytest.mark.parametrize(
    "arrow_type", [pa.int8(), pa.int16(), pa.int32(), pa.uint8(), pa.uint16(), pa.uint32()]
)
def test_narrow_integer_types(arrow_type):
    info = np.iinfo(arrow_type.to_pandas_dtype())
    rng = np.random.default_rng(RNG_SEED)
    values = rng.integers(info.min, info.max, size=300, endpoint=True).tolist()
    values += [int(info.min), int(info.max), 0]
    _check(pa.array(values, arrow_type))


def test_uint64_small_and_above_int64_range():
    rng = np.random.default_rng(RNG_SEED)
    small = rng.integers(0, 2**63, size=100, dtype=np.uint64).tolist()
    _check(pa.array(small, pa.uint64()))
    big = [2**63, 2**64 - 1, 2**63 + 12345] + small[:10]
    got = _check(pa.array(big, pa.uint64()))
    # Outside int64 the contract hashes the msgpack encoding, not 8 little-endian bytes.
    assert int(got[0]) != mmh3.hash((2**63).to_bytes(8, "little"), 0, signed=False)


def test_float64_specials_and_random():
    rng = np.random.default_rng(RNG_SEED)
    values = (rng.standard_normal(300) * 1e6).tolist()
    values += [0.0, -0.0, float("nan"), float("inf"), float("-inf"), 1.5, 5e-324, 1.7e308]
    got = _check(pa.array(values, pa.float64()))
    assert got[-8] == got[-7]  # -0.0 is the key 0.0 (state/keys.py); changed deliberately


@pytest.mark.parametrize("arrow_type", [pa.float32(), pa.float16()])
def test_narrow_floats_hash_like_python_floats(arrow_type):
    values = [0.0, -0.0, 1.5, -2.25, float("nan"), float("inf"), 0.1, 3.0e4]
    _check(pa.array(np.array(values).astype(arrow_type.to_pandas_dtype()), arrow_type))


def test_bools():
    _check(pa.array([True, False, True, True, False]))
    _check(pa.array([True, None, False]))


@pytest.mark.parametrize("alphabet", [ASCII, NON_ASCII], ids=["ascii", "non_ascii"])
@pytest.mark.parametrize("arrow_type", [pa.string(), pa.large_string()])
def test_strings_of_every_length(alphabet, arrow_type):
    rng = np.random.default_rng(RNG_SEED)
    values = _random_strings(rng, 400, alphabet)
    # Every byte length 0..40, so every remainder mod 4 and every block count is covered.
    values += ["x" * n for n in range(41)]
    _check(pa.array(values, arrow_type))


@pytest.mark.parametrize("arrow_type", [pa.binary(), pa.large_binary()])
def test_binary(arrow_type):
    rng = np.random.default_rng(RNG_SEED)
    values = [rng.bytes(int(n)) for n in rng.integers(0, 41, size=300)]
    values += [b"", b"\x00", b"\x00\x00\x00\x00", b"\xff" * 5]
    _check(pa.array(values, arrow_type))


def test_fixed_size_binary():
    _check(pa.array([b"abcd", b"efgh", None], pa.binary(4)))


@pytest.mark.skipif(not hasattr(pa, "string_view"), reason="view types need pyarrow >= 16")
def test_view_types():
    _check(pa.array(["a", "", "longer than twelve bytes", None], pa.string_view()))
    _check(pa.array([b"a", b"", b"\x00" * 13, None], pa.binary_view()))


def test_long_keys_take_the_per_row_path():
    values = ["s" * n for n in (0, 3, 255, 256, 257, 300, 1000, 5000)] + ["é" * 200, None]
    _check(pa.array(values))
    _check(pa.array([v.encode() if v is not None else None for v in values], pa.binary()))


def test_sliced_arrays():
    rng = np.random.default_rng(RNG_SEED)
    strings = pa.array(_random_strings(rng, 80, NON_ASCII))
    ints = pa.array(rng.integers(-(2**40), 2**40, size=80).tolist())
    floats = pa.array(rng.standard_normal(80).tolist())
    bools = pa.array(rng.integers(0, 2, size=80).astype(bool).tolist())
    large = pa.array(_random_strings(rng, 80, ASCII), pa.large_binary())
    for array in (strings, ints, floats, bools, large):
        sliced = array.slice(3, 50)
        assert sliced.offset == 3
        _check(sliced)
        _check(sliced.slice(7, 20))


def test_chunked_arrays():
    chunked = pa.chunked_array([["a", "bb"], [], ["ccc", None, "dddd"]])
    _check(chunked)
    _check(pa.chunked_array([[1, 2], [3]], pa.int64()))
    assert key_hashes(pa.chunked_array([], pa.string())).shape == (0,)
    assert key_hashes(pa.array([], pa.string())).shape == (0,)


def test_nulls_hash_like_none():
    none = np.uint32(key_hash(None))
    for array in (
        pa.array(["a", None, "ccccc", None]),
        pa.array([None, 5, -7], pa.int64()),
        pa.array([None, 5, 7], pa.uint8()),
        pa.array([2**64 - 1, None], pa.uint64()),
        pa.array([1.0, None]),
        pa.array([None, b"xyz"], pa.large_binary()),
        pa.array([None, None]),
    ):
        got = _check(array)
        assert (got[np.asarray(array.is_null())] == none).all()
    _check(pa.array(["x", None, "yyyyyy", None]).slice(1, 3))


def test_dictionary_arrays():
    dictionary = pa.array(["red", "green", None, "blue"]).dictionary_encode()
    _check(dictionary)
    _check(dictionary.slice(1, 2))
    indices = pa.array([0, None, 2, 1, 0], pa.int8())
    _check(pa.DictionaryArray.from_arrays(indices, pa.array([10, 20, 30], pa.int64())))
    all_null = pa.array([None, None], pa.int32())
    _check(pa.DictionaryArray.from_arrays(all_null, pa.array([], pa.string())))


def test_fallback_types():
    lists = pa.array([[1, 2], [], None, [3, -4, 2**40]], pa.list_(pa.int64()))
    got = _check(lists)
    # Lists hash as the engine's tuples (and msgpack encodes both the same way).
    assert int(got[0]) == key_hash((1, 2)) == key_hash([1, 2])
    _check(pa.array([{"a": 1, "b": "x"}, None, {"a": 2, "b": None}]))


def test_rejects_non_arrow_input():
    with pytest.raises(TypeError):
        key_hashes(["a", "b"])


@pytest.mark.parametrize("m", [128, 7, 32768])
def test_channels_match_scalar_assignment(m):
    rng = np.random.default_rng(RNG_SEED)
    keys = [f"key-{i}" for i in rng.integers(0, 10**9, size=300)]
    array = pa.array(keys)
    groups = key_groups(array, m)
    np.testing.assert_array_equal(groups, [key_group_for(k, m) for k in keys])
    for p in range(1, 6):
        expected = [operator_index_for_key_group(key_group_for(k, m), p, m) for k in keys]
        np.testing.assert_array_equal(channels_for(array, p, m), expected)
    ints = rng.integers(-(2**62), 2**62, size=200).tolist()
    expected = [operator_index_for_key_group(key_group_for(k, m), 3, m) for k in ints]
    np.testing.assert_array_equal(channels_for(pa.array(ints), 3, m), expected)


def test_invalid_parallelism():
    with pytest.raises(ValueError):
        key_groups(pa.array([1]), 0)
    with pytest.raises(ValueError):
        channels_for(pa.array([1]), 0, 128)


def test_null_slots_with_bytes_underneath():
    # Arrow allows a null slot to span bytes; they must not leak into the hash.
    offsets = pa.py_buffer(np.array([0, 3, 300, 305], dtype=np.int32).tobytes())
    data = pa.py_buffer(b"abc" + b"z" * 297 + b"hello")
    validity = pa.py_buffer(np.packbits([1, 0, 1], bitorder="little").tobytes())
    array = pa.Array.from_buffers(pa.string(), 3, [validity, offsets, data], null_count=1)
    assert array.to_pylist() == ["abc", None, "hello"]
    _check(array)


def test_key_groups_of_a_list_equal_key_group_for_each_str_or_int_key():
    from airflow_checkpoint_provider.engine.state.key_hashing import key_groups_of

    strs = [f"k{i}" for i in range(500)] + ["", "é", "日本語" * 40]
    ints = [0, -1, 2**63 - 1, -(2**63)] + list(range(-3000, 3000, 7))
    for keys in (strs, ints):
        assert key_groups_of(keys, 128) == [key_group_for(k, 128) for k in keys]
    assert key_groups_of([], 128) == []


@pytest.mark.parametrize("keys", [[1, True], [1, "a"], [2**63], [1.5], [("a", 1)], ["\ud800"]])
def test_key_groups_of_returns_none_for_lists_it_cannot_hash_in_one_pass(keys):
    from airflow_checkpoint_provider.engine.state.key_hashing import MIN_VECTOR_KEYS, key_groups_of

    assert key_groups_of(keys * MIN_VECTOR_KEYS, 128) is None


def test_key_groups_of_leaves_short_lists_to_the_per_key_hash():
    from airflow_checkpoint_provider.engine.state.key_hashing import MIN_VECTOR_KEYS, key_groups_of

    assert key_groups_of([f"k{i}" for i in range(MIN_VECTOR_KEYS - 1)], 128) is None
