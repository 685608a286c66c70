import pytest

from airflow_checkpoint_provider.engine.state.keygroups import (
    KeyGroupRange,
    key_group_for,
    key_group_range_for,
    key_hash,
    operator_index_for_key_group,
)


def test_key_hash_is_stable_across_processes_and_versions():
    # Pinned values: changing them breaks every savepoint (see the module contract).
    keys = ("k1", 42, b"x", ("a", 1), 1.5, True)
    assert [key_hash(k) for k in keys] == [
        4257636394, 1871679806, 1050319643, 3575832957, 4034560987, 2024985674]
    assert [key_group_for(k, 128) for k in keys] == [42, 62, 27, 125, 91, 74]


def test_pinned_key_groups_do_not_change():
    import mmh3

    assert key_hash("hello") == mmh3.hash(b"hello", 0, signed=False)
    assert key_hash(1) == mmh3.hash((1).to_bytes(8, "little", signed=True), 0, signed=False)


@pytest.mark.parametrize("p", [1, 2, 3, 5, 7, 128])
def test_ranges_are_contiguous_cover_everything_and_match_assignment(p):
    m = 128
    ranges = [key_group_range_for(i, p, m) for i in range(p)]
    assert ranges[0].start == 0 and ranges[-1].end == m - 1
    for a, b in zip(ranges, ranges[1:], strict=False):
        assert b.start == a.end + 1
    for i, r in enumerate(ranges):
        for kg in r:
            assert operator_index_for_key_group(kg, p, m) == i


def test_range_intersection():
    assert len(KeyGroupRange(0, 10).intersect(KeyGroupRange(5, 20))) == 6
    assert len(KeyGroupRange(0, 4).intersect(KeyGroupRange(5, 20))) == 0
