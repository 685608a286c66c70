"""``make demo``: run the example job on the embedded defaults and say where things are."""

from __future__ import annotations

import logging
import os
import shutil
import sys
import time

from airflow_checkpoint_provider.engine import read_committed
from airflow_checkpoint_provider.engine.client import JobStatus, MetadataStore
from airflow_checkpoint_provider.examples.running_sum import build
from airflow_checkpoint_provider.settings import EXAMPLE_DIR


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    root = os.path.abspath(EXAMPLE_DIR.get())
    shutil.rmtree(root, ignore_errors=True)
    pipeline = build(root, num_records=200_000, num_keys=1000, interval_ms=500)
    t0 = time.monotonic()
    result = pipeline.run()
    elapsed = time.monotonic() - t0
    out_dir = os.path.join(root, "output")
    rows = sum(1 for _ in read_committed(out_dir))
    store = MetadataStore(pipeline.metadata_url)
    checkpoints = store.list_checkpoints(result.job_id)
    store.close()
    print()
    print(f"Job {result.job_name} ({result.job_id}) {result.status} in {elapsed:.1f} s")
    print(f"  committed output : {out_dir}  ({rows} records)")
    print(f"  checkpoints      : {os.path.join(root, 'checkpoints', result.job_name, result.job_id)}")
    print(f"  metadata DB      : {result.metadata_url}")
    print(f"  checkpoints done : {result.checkpoints_completed} completed, "
          f"{result.checkpoints_failed} failed; latest {result.latest_checkpoint}")
    for c in checkpoints[-5:]:
        print(f"    chk-{c.checkpoint_id:<4} {c.status:<10} {c.duration_ms or 0:>5} ms "
              f"{c.state_size or 0:>9} bytes")
    print(f"Inspect one: .venv/bin/ckpt inspect {result.latest_checkpoint}")
    return 0 if result.status == JobStatus.FINISHED else 1


if __name__ == "__main__":
    sys.exit(main())
