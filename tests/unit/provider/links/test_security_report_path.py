"""Issue 42, item 6: ``write_history_report`` built its file name from the job name read
from the metadata DB; ``job_name='../escaped_here/pwn'`` wrote outside the report folder.
Now the name is validated (an invalid one becomes ``job``), the file must land inside the
folder, and it is ``0600`` in a folder created ``0700``."""

from __future__ import annotations

import os
import sqlite3
import stat

from airflow_checkpoint_provider.engine.catalog import MetadataStore, upgrade_database
from airflow_checkpoint_provider.links.checkpoint import write_history_report


def test_a_job_name_from_the_db_cannot_move_the_report_out_of_its_folder(tmp_path):
    url = f"sqlite:///{tmp_path}/meta.db"
    upgrade_database(url)
    with MetadataStore(url) as store:
        store.create_job(job_id="job1", job_name="ok", parallelism=1)
    with sqlite3.connect(tmp_path / "meta.db") as db:  # a metadata-DB writer
        db.execute("UPDATE jobs SET job_name = '../escaped_here/pwn' WHERE job_id = 'job1'")
    (tmp_path / "escaped_here").mkdir()
    reports = tmp_path / "reports" / "nested"

    with MetadataStore(url) as store:
        path = write_history_report(store, "job1", str(reports))

    assert os.listdir(tmp_path / "escaped_here") == []
    assert path == str(reports / "job-job1-checkpoints.html") and os.path.isfile(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(reports).st_mode) == 0o700
