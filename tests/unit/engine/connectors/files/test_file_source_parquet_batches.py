"""A Parquet split read with the default settings hands its source batches as large as the
pipeline's default Arrow batch (issue 55 item 3, bench/defaults.py): the source asks for
``arrow_batch_size`` rows (65,536 by default) and gets them in one read, not in slices of a
smaller decode size (4096 before, which cost Nexmark jobs up to ~20% of their CPU in
per-batch overhead). A source asking for less (its outputs' credit) still gets less."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_checkpoint_provider.engine import FileSource, Pipeline
from airflow_checkpoint_provider.engine.connectors.base import SourceContext

CTX = SourceContext(job_id="j", job_name="n", operator_uid="src", subtask_index=0,
                    parallelism=1, attempt=0)
ROWS = 150_000


def _sizes(reader, ask: int) -> list[int]:
    sizes = []
    while (batch := reader.read_batch(ask)) is not None:
        sizes.append(batch.num_rows)
    return sizes


def test_default_parquet_reads_are_the_pipelines_default_arrow_batch(tmp_path):
    pq.write_table(pa.table({"id": pa.array(range(ROWS), pa.int64())}),
                   str(tmp_path / "a.parquet"), row_group_size=ROWS)
    arrow_batch = Pipeline("p").job_config().effective_arrow_batch_size()
    assert arrow_batch == 65_536
    src = FileSource(str(tmp_path), format="parquet")
    assert _sizes(src.open_split("a.parquet", None, CTX), arrow_batch) == [
        65_536, 65_536, ROWS - 2 * 65_536]
    # a smaller ask (a source held to its outputs' credit) reads what it asked for
    small = _sizes(src.open_split("a.parquet", None, CTX), 1000)
    assert max(small) == 1000 and sum(small) == ROWS


def test_an_explicit_parquet_batch_size_still_bounds_a_read(tmp_path):
    pq.write_table(pa.table({"id": pa.array(range(10_000), pa.int64())}),
                   str(tmp_path / "a.parquet"))
    src = FileSource(str(tmp_path), format="parquet", parquet_batch_size=4096)
    assert _sizes(src.open_split("a.parquet", None, CTX), 65_536) == [4096, 4096, 1808]
