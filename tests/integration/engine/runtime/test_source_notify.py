"""SplitReader.notify_checkpoint_complete: a split reader learns which of its positions a
completed checkpoint holds (what a CDC source may acknowledge upstream)."""

from __future__ import annotations

import json
import os

import pytest

from airflow_checkpoint_provider.engine import CheckpointConfig, FileSink, GeneratorSource, Pipeline
from airflow_checkpoint_provider.engine.connectors.generator import _GeneratorReader


class NotifiedGenerator(GeneratorSource):
    """Appends ``[split, checkpoint id, position]`` to ``log`` on every notification."""

    def __init__(self, log: str, **kwargs) -> None:
        super().__init__(**kwargs)
        self.log = log

    def open_split(self, split_id, position, ctx):
        reader = super().open_split(split_id, position, ctx)
        log = self.log

        class Reader(_GeneratorReader):
            def notify_checkpoint_complete(self, checkpoint_id, position):
                with open(log, "a") as f:
                    f.write(json.dumps([split_id, checkpoint_id, position]) + "\n")

        reader.__class__ = Reader
        return reader


@pytest.mark.timeout(120)
def test_readers_are_told_the_positions_completed_checkpoints_hold(tmp_path):
    log = str(tmp_path / "notified.jsonl")
    p = Pipeline("notify", checkpoint=CheckpointConfig(interval_ms=100, directory=str(tmp_path / "ckpt")),
                 metadata_url=f"sqlite:///{tmp_path}/meta.db")
    (p.source(NotifiedGenerator(log, num_records=20_000, splits=2, records_per_second=8000),
              uid="gen", parallelism=2)
      .sink(FileSink(str(tmp_path / "out")), uid="out"))
    result = p.run()
    assert result.status == "FINISHED" and result.checkpoints_completed >= 2
    assert os.path.exists(log), "no reader was notified"
    with open(log) as f:
        seen = [json.loads(line) for line in f]
    for split in ("split-0", "split-1"):
        mine = [(c, pos) for s, c, pos in seen if s == split]
        assert mine, split
        # in checkpoint order, positions never go back, and each lies within the split
        assert [c for c, _ in mine] == sorted(c for c, _ in mine)
        assert [pos for _, pos in mine] == sorted(pos for _, pos in mine)
        assert all(0 <= pos <= 10_000 for _, pos in mine)
