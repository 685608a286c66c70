"""end_offsets with a consumer that reports a partition's end twice (seen against Tansu in a
loaded CI run: librdkafka raised "Can't subtract from empty assignment" on the second
unassign, and a promotion was refused)."""
from __future__ import annotations

import pytest

ck = pytest.importorskip("confluent_kafka")

from airflow_checkpoint_provider.engine.connectors.kafka import offsets  # noqa: E402


class _Eof:
    def __init__(self, topic, partition, offset):
        self._tp, self._offset = (topic, partition), offset

    def error(self):
        return ck.KafkaError(ck.KafkaError._PARTITION_EOF)

    def topic(self):
        return self._tp[0]

    def partition(self):
        return self._tp[1]

    def offset(self):
        return self._offset


class _Consumer:
    """Assigned partitions as librdkafka keeps them: unassigning one not assigned raises."""

    def __init__(self):
        self.assigned: set = set()
        self.batches = [[_Eof("t", 0, 7), _Eof("t", 0, 7)], [_Eof("t", 1, 3)]]

    def get_watermark_offsets(self, tp, timeout=None):
        return 0, 0

    def assign(self, tps):
        self.assigned = {(tp.topic, tp.partition) for tp in tps}

    def incremental_unassign(self, tps):
        for tp in tps:
            if (tp.topic, tp.partition) not in self.assigned:
                raise ck.KafkaException(ck.KafkaError(ck.KafkaError._INVALID_ARG,
                                                      "Can't subtract from empty assignment"))
            self.assigned.discard((tp.topic, tp.partition))

    def consume(self, n, timeout=None):
        return self.batches.pop(0) if self.batches else []

    def close(self):
        pass


def test_a_partition_end_reported_twice_is_taken_once(monkeypatch):
    consumer = _Consumer()
    monkeypatch.setattr(offsets, "_probe", lambda conf, isolation: consumer)
    found = offsets.end_offsets({"bootstrap.servers": "127.0.0.1:1"}, [("t", 0), ("t", 1)],
                                timeout=5)
    assert found == {("t", 0): 7, ("t", 1): 3}
    assert consumer.assigned == set()
