"""The generator source: dict and Arrow modes give the same records, string or int keys."""

import time

import numpy as np
import pytest

from airflow_checkpoint_provider.engine import GeneratorSource


@pytest.mark.parametrize("int_keys", [False, True])
def test_arrow_batches_equal_the_dict_records(int_keys):
    src = GeneratorSource(1000, num_keys=37, seed=5, int_keys=int_keys)
    ids = np.arange(0, 1000, 7, dtype=np.int64)
    assert src.record_batch(ids).to_pylist() == [src.record(int(i)) for i in ids]


def test_int_keys_have_the_distribution_of_the_string_keys():
    s, i = GeneratorSource(num_keys=100, seed=3), GeneratorSource(num_keys=100, seed=3,
                                                                  int_keys=True)
    for n in range(200):
        a, b = s.record(n), i.record(n)
        assert a["key"] == f"k{b['key']}" and isinstance(b["key"], int)
        assert (a["id"], a["value"]) == (b["id"], b["value"])
    ints = GeneratorSource(num_keys=100, int_keys=True).record_batch(np.arange(5000))
    assert str(ints.schema.field("key").type) == "int64"
    assert len(set(ints.column("key").to_pylist())) == 100


@pytest.mark.parametrize("int_keys", [False, True])
def test_vectorized_dict_records_equal_record_by_record(int_keys):
    src = GeneratorSource(1000, num_keys=37, seed=5, int_keys=int_keys)
    ids = np.arange(3, 1000, 11, dtype=np.int64)
    got = src.records(ids)
    assert got == [src.record(int(i)) for i in ids]
    assert all(type(v) is int for r in got for k, v in r.items() if k != "key")


def test_a_subclass_overriding_record_gets_its_records_in_dict_mode():
    class Tagged(GeneratorSource):
        def record(self, i):
            return {**super().record(i), "tag": "t"}

    ids = np.arange(5, dtype=np.int64)
    assert [r["tag"] for r in Tagged(5).records(ids)] == ["t"] * 5


def test_a_rate_limited_split_emits_the_records_due_together_at_its_rate():
    from airflow_checkpoint_provider.engine.connectors.generator import PACE_S

    def run(rate: float, seconds: float) -> tuple[list[int], float]:
        reader = GeneratorSource(10**9, splits=1, records_per_second=rate).open_split("split-0", None, None)
        sizes, started = [], time.monotonic()
        while time.monotonic() - started < seconds:
            batch = reader.read_batch(1000)
            if batch:
                sizes.append(len(batch))
            time.sleep(0.002)  # the source loop reads again a few ms after an empty read
        return sizes, time.monotonic() - started

    # 200 records/s: paced, not one record per read
    sizes, took = run(200, 0.5)
    assert len(sizes) <= took / PACE_S + 2, sizes
    assert 200 * took - 200 * PACE_S - 2 <= sum(sizes) <= 200 * took + 2  # the rate holds
    # 400,000 records/s: the records due fill a batch well before the pace; never held back
    sizes, took = run(400_000, 0.1)
    assert len(sizes) > took / PACE_S * 2, sizes
    assert sum(sizes) >= 100_000 * took - 1000
