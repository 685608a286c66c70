"""The background cleaner deletes on its own thread, in order, and close() waits for it."""

import logging
import os
import threading

from airflow_checkpoint_provider.engine.checkpoint.deleter import CheckpointCleaner


def test_deletions_run_off_the_callers_thread_in_order_and_close_waits(tmp_path):
    seen = []
    release = threading.Event()

    class SlowFs:
        def remove_tree(self, path):
            release.wait(10)
            seen.append(("tree", path, threading.current_thread().name))

        def remove_file(self, path):
            seen.append(("file", path, threading.current_thread().name))

    # the cleaner's own file system: another test's coordinator may still be deleting on
    # its cleaner thread, through the module's filesystem_for
    c = CheckpointCleaner("job", fs_for=lambda path: SlowFs())
    c.remove_tree("/a")          # blocks the cleaner, not us
    c.remove_file("/b")
    assert seen == []
    release.set()
    c.close()
    assert [(k, p) for k, p, _ in seen] == [("tree", "/a"), ("file", "/b")]
    assert all(name.startswith("cleaner-job") for _, _, name in seen)


def test_a_failed_deletion_is_logged_not_raised(tmp_path, caplog):
    class BrokenFs:
        def remove_tree(self, path):
            raise PermissionError("read-only")

    c = CheckpointCleaner("job", fs_for=lambda path: BrokenFs())
    with caplog.at_level(logging.WARNING):
        c.remove_tree(str(tmp_path / "chk-1"))
        c.close()
    assert any("could not delete" in r.getMessage() and "read-only" in r.getMessage()
               for r in caplog.records)


def test_real_files_are_gone_after_close(tmp_path):
    d = tmp_path / "chk-1"
    d.mkdir()
    (d / "x.state").write_bytes(b"1")
    f = tmp_path / "shared.sst"
    f.write_bytes(b"2")
    c = CheckpointCleaner("job")
    c.remove_tree(str(d))
    c.remove_file(str(f))
    c.close()
    assert not os.path.exists(d) and not os.path.exists(f)
