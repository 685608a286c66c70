"""Variants of ``KafkaSource(arrow=True)`` for bench/peers/kafka.py's ``--source-batches``
(an importable module: the job's slots unpickle the source by reference).

* ``pylist``: the Arrow path before kafka/batches.py -- each value decoded to a dict
  (msgspec), the batch converted with ``RecordBatch.from_pylist``, at most ``FETCH`` records
  per batch (one fetch of the shared consumer);
* ``arrow-1k``: today's decoder (pyarrow's JSON reader) with batches of at most ``FETCH``
  records: separates the decoder's share of the gain from the batch size's.
"""

from __future__ import annotations

import pyarrow as pa

from airflow_checkpoint_provider.engine.connectors.kafka import KafkaSource

#: records per batch of the variants (the shared consumer's fetch before batches.py)
FETCH = 1000


class _PylistDecoder:
    def __init__(self, source: KafkaSource) -> None:
        self.source = source

    def decode(self, msgs) -> pa.RecordBatch:
        return pa.RecordBatch.from_pylist([r for m in msgs for r in self.source.records(m)])


class _SmallBatches:
    """A split reader giving batches of at most :data:`FETCH` records."""

    def __init__(self, reader) -> None:
        self.reader = reader

    def read_batch(self, max_records: int):
        return self.reader.read_batch(min(max_records, FETCH))

    def __getattr__(self, name: str):
        return getattr(self.reader, name)


class PylistKafkaSource(KafkaSource):
    def open_split(self, split_id, position, ctx):
        reader = super().open_split(split_id, position, ctx)
        reader.decoder = _PylistDecoder(self)
        return _SmallBatches(reader)


class SmallBatchKafkaSource(KafkaSource):
    def open_split(self, split_id, position, ctx):
        return _SmallBatches(super().open_split(split_id, position, ctx))


#: ``--source-batches`` value -> the source class of ours' aggregate workload
SOURCES = {"arrow": KafkaSource, "dicts": KafkaSource, "pylist": PylistKafkaSource,
           "arrow-1k": SmallBatchKafkaSource}
