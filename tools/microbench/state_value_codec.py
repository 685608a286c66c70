"""Micro-benchmark of the state value contract (issue 35): the record data path's encoding
(pack_records + unpack_records of a 1000-record batch) and the heap state hot paths
(ValueState.update, MapState.put, ListState.add, ReducingState.add) with the checks.

Run it against two trees to compare:
``PYTHONPATH=<tree> python tools/microbench/state_value_codec.py`` (a maintainer's component
benchmark, tools/microbench/README.md).
Prints the best of 7 repetitions per case in CPU time (process_time: steadier than wall
time on a loaded machine), microseconds per 1000 operations or records.
"""

from __future__ import annotations

import time

from airflow_checkpoint_provider.engine.serialization import pack_records, unpack_records
from airflow_checkpoint_provider.engine.state.descriptors import (
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from airflow_checkpoint_provider.engine.state.heap import HeapKeyedStateBackend
from airflow_checkpoint_provider.engine.state.keygroups import KeyGroupRange

N = 1000
RECORDS = [{"auction": i, "bidder": i * 7, "price": i * 1.5, "channel": "web",
            "url": f"http://x/{i}", "ts": 1_700_000_000_000 + i} for i in range(N)]
NESTED = [{"id": i, "window": (i, i + 10), "tags": ["a", "b"], "extra": {"n": i}}
          for i in range(N)]


def best(fn, reps: int = 7, inner: int = 20) -> float:
    fn()
    times = []
    for _ in range(reps):
        t0 = time.process_time()
        for _ in range(inner):
            fn()
        times.append((time.process_time() - t0) / inner)
    return min(times) * 1e6


def main() -> None:
    for name, recs in (("flat records", RECORDS), ("nested records (tuple field)", NESTED)):
        data = pack_records(recs)
        enc = best(lambda recs=recs: pack_records(recs))
        dec = best(lambda data=data: unpack_records(data))
        print(f"{name:32s} encode {enc:7.0f} us  decode {dec:7.0f} us  "
              f"round trip {enc + dec:7.0f} us per {N} records")
    backend = HeapKeyedStateBackend("bench", KeyGroupRange(0, 127), 128)
    value = backend.get_state(ValueStateDescriptor("v"))
    mapping = backend.get_state(MapStateDescriptor("m"))
    lst = backend.get_state(ListStateDescriptor("l"))
    red = backend.get_state(ReducingStateDescriptor("r", lambda a, b: a + b))
    keys = list(range(N))
    dict_value = {"count": 3, "sum": 1.5, "last": "x"}

    def per_key(op):
        def run():
            for k in keys:
                backend.set_current_key(k)
                op(k)
        return run

    base = best(per_key(lambda k: None))
    cases = {
        "ValueState.update(int)": lambda k: value.update(k),
        "ValueState.update(dict)": lambda k: value.update(dict_value),
        "ValueState.update(tuple)": lambda k: value.update((k, "x")),
        "MapState.put(tuple key, int)": lambda k: mapping.put((k % 3, k % 5), k),
        "ListState.add(int)": lambda k: lst.add(k),
        "ReducingState.add(int)": lambda k: red.add(k),
    }
    print(f"{'set_current_key alone':32s} {base:7.0f} us per {N}")
    for name, op in cases.items():
        print(f"{name:32s} {best(per_key(op)) - base:7.0f} us per {N} (set_current_key "
              "subtracted)")
        lst.clear()


if __name__ == "__main__":
    main()
