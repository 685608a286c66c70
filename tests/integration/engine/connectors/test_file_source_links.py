"""FileSource and hostile directory contents: a JSON line nested deeper than the parser
allows fails the job at once as a malformed file; symbolic links are not followed unless
asked, never to a target outside the directory (or symlink_roots), and a file reachable
under several names is read once -- also in continuous mode."""

from __future__ import annotations

import json
import logging
import os
import time

import pytest
from pipelines import Background, RunningSum, check_exactly_once

from airflow_checkpoint_provider.engine import (
    CheckpointConfig,
    ConfigurationError,
    FileSink,
    FileSource,
    JobFailedError,
    Pipeline,
    RestartStrategy,
    read_committed,
)
from airflow_checkpoint_provider.engine.connectors.base import SourceContext
from airflow_checkpoint_provider.engine.connectors.files.source import MalformedFileError
from airflow_checkpoint_provider.engine.errors import RestoreError

CTX = SourceContext(job_id="j", job_name="n", operator_uid="src", subtask_index=0,
                    parallelism=1, attempt=0)
PER_FILE, KEYS = 200, 5


def records(tag: int, n: int = PER_FILE) -> list[dict]:
    return [{"id": tag * n + j, "key": f"k{(tag * n + j) % KEYS}", "value": j % 7}
            for j in range(n)]


def write(path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def read_split(source: FileSource, split: str, position=None) -> list[dict]:
    reader = source.open_split(split, position, CTX)
    out = []
    while (batch := reader.read_batch(1000)) is not None:
        out.extend(batch)
    return out


def expected(tags) -> dict:
    per_key: dict = {}
    for tag in tags:
        for r in records(tag):
            e = per_key.setdefault(r["key"], {"ids": set(), "sum": 0})
            e["ids"].add(r["id"])
            e["sum"] += r["value"]
    return per_key


# -- a JSON line nested too deep -----------------------------------------------------------

def _deep_file(path) -> None:
    write(path, records(0, 3))
    with open(path, "a") as f:
        f.write('{"id": 3, "key": "k1", "value": 1, "a": ' + "[" * 100_000 + "]" * 100_000
                + "}\n")


def test_a_json_line_nested_too_deep_is_a_malformed_file_naming_file_and_line(tmp_path):
    _deep_file(tmp_path / "a.jsonl")
    with pytest.raises(MalformedFileError, match=r"line 4 \(byte \d+\) of .*a\.jsonl nests JSON"):
        read_split(FileSource(str(tmp_path)), "a.jsonl")


@pytest.mark.timeout(120)
def test_a_json_line_nested_too_deep_fails_the_job_without_restarts(tmp_path):
    _deep_file(tmp_path / "in" / "a.jsonl")
    p = Pipeline("deep", checkpoint=CheckpointConfig(interval_ms=100,
                                                     directory=str(tmp_path / "ck")),
                 restart_strategy=RestartStrategy.fixed_delay(attempts=3, delay_ms=0),
                 metadata_url=f"sqlite:///{tmp_path}/meta.db")
    (p.source(FileSource(str(tmp_path / "in")), uid="files").key_by("key")
      .process(RunningSum(), uid="sum").sink(FileSink(str(tmp_path / "out")), uid="out"))
    with pytest.raises(JobFailedError) as failed:
        p.run()
    result = failed.value.result
    assert result.restarts == 0, result.failure_reason
    assert "MalformedFileError" in result.failure_reason and "line 4" in result.failure_reason


# -- symbolic links ------------------------------------------------------------------------

@pytest.fixture
def linked(tmp_path):
    """``in/``: a.jsonl, b.jsonl -> a.jsonl, c.jsonl -> ../outside/secret.jsonl,
    d.jsonl -> ../outside/secret.jsonl (newer), sub -> ../outside, e.jsonl (hard link of
    a.jsonl)."""
    write(tmp_path / "in" / "a.jsonl", records(0))
    write(tmp_path / "outside" / "secret.jsonl", records(9))
    os.symlink(tmp_path / "in" / "a.jsonl", tmp_path / "in" / "b.jsonl")
    os.symlink(tmp_path / "outside" / "secret.jsonl", tmp_path / "in" / "c.jsonl")
    os.symlink(tmp_path / "outside" / "secret.jsonl", tmp_path / "in" / "d.jsonl")
    os.utime(tmp_path / "in" / "c.jsonl", (1000, 1000), follow_symlinks=False)  # older link
    os.symlink(tmp_path / "outside", tmp_path / "in" / "sub")
    os.link(tmp_path / "in" / "a.jsonl", tmp_path / "in" / "e.jsonl")
    return tmp_path


def test_links_are_skipped_by_default_with_a_warning_and_refused_when_opened(linked, caplog):
    source = FileSource(str(linked / "in"))
    with caplog.at_level(logging.WARNING):
        assert source.splits() == ["a.jsonl"]  # e.jsonl: the same file (a hard link)
    warned = " ".join(r.getMessage() for r in caplog.records)
    for name in ("b.jsonl", "c.jsonl", "d.jsonl"):
        assert f"{name}: it is a symbolic link" in warned and "follow_symlinks=True" in warned
    assert "sub: it is a symbolic link to a directory" in warned
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        source.splits()  # a continuous source lists every monitor_interval: warned once
    assert not [r for r in caplog.records if "symbolic link" in r.getMessage()]
    # split ids from a snapshot (or a file swapped for a link after the listing)
    with pytest.raises(ConfigurationError, match=r"c\.jsonl is \(or lies under\) a symbolic "
                                                 r"link to .*secret\.jsonl"):
        read_split(source, "c.jsonl")
    with pytest.raises(RestoreError, match="symbolic link"):
        read_split(source, "c.jsonl", 0)
    with pytest.raises(ConfigurationError, match="lies under"):
        read_split(source, "sub/secret.jsonl")
    assert read_split(source, "a.jsonl") == records(0)


def test_follow_symlinks_reads_links_inside_the_directory_once_and_never_outside(linked,
                                                                                 caplog):
    source = FileSource(str(linked / "in"), follow_symlinks=True)
    with caplog.at_level(logging.WARNING):
        assert source.splits() == ["a.jsonl"]  # b.jsonl and e.jsonl are a.jsonl
    assert "c.jsonl: it is a symbolic link to" in caplog.text and "outside the directory" \
        in caplog.text
    with pytest.raises(ConfigurationError, match="outside the directory and symlink_roots"):
        read_split(source, "c.jsonl")
    rooted = FileSource(str(linked / "in"), follow_symlinks=True,
                        symlink_roots=[str(linked / "outside")])
    # c.jsonl and d.jsonl are one file: the older link names it
    assert rooted.splits() == ["a.jsonl", "c.jsonl"]
    assert read_split(rooted, "c.jsonl") == records(9)
    with pytest.raises(ConfigurationError, match="symlink_roots needs follow_symlinks=True"):
        FileSource(str(linked / "in"), symlink_roots=[str(linked / "outside")])


def test_a_file_swapped_for_a_link_after_the_listing_is_not_read(tmp_path):
    write(tmp_path / "in" / "a.jsonl", records(0))
    write(tmp_path / "secret.jsonl", records(9))
    source = FileSource(str(tmp_path / "in"))
    assert source.splits() == ["a.jsonl"]
    os.remove(tmp_path / "in" / "a.jsonl")
    os.symlink(tmp_path / "secret.jsonl", tmp_path / "in" / "a.jsonl")
    with pytest.raises(RestoreError, match="symbolic link"):
        read_split(source, "a.jsonl", 0)


def _continuous(root, **options) -> Pipeline:
    p = Pipeline("links", checkpoint=CheckpointConfig(interval_ms=150,
                                                      directory=str(root / "ckpt")),
                 restart_strategy=RestartStrategy.fixed_delay(attempts=3, delay_ms=0),
                 metadata_url=f"sqlite:///{root}/meta.db")
    (p.source(FileSource(str(root / "in"), format="jsonl", monitor_interval=0.1, **options),
              uid="files", parallelism=2)
      .key_by("key").process(RunningSum(), uid="sum", parallelism=2)
      .sink(FileSink(str(root / "out")), uid="out"))
    return p


def _committed_ids(root) -> list[int]:
    out = root / "out"
    return [r["id"] for r in read_committed(str(out))] if out.exists() else []


@pytest.mark.timeout(180)
@pytest.mark.parametrize("follow", [False, True], ids=["default", "follow_symlinks"])
def test_links_landing_in_continuous_mode_never_read_a_file_twice(tmp_path, follow):
    write(tmp_path / "in" / "f0.jsonl", records(0))
    write(tmp_path / "outside" / "secret.jsonl", records(9))
    bg = Background(_continuous(tmp_path, **({"follow_symlinks": True} if follow else {})))
    job = bg.wait_running()
    deadline = time.monotonic() + 60
    while len(_committed_ids(tmp_path)) < PER_FILE and time.monotonic() < deadline:
        time.sleep(0.1)
    # links to the file already read (old and new names) and to a file outside
    os.symlink(tmp_path / "in" / "f0.jsonl", tmp_path / "in" / "again.jsonl")
    os.symlink(tmp_path / "in" / "f0.jsonl", tmp_path / "in" / "z-again.jsonl")
    os.symlink(tmp_path / "outside" / "secret.jsonl", tmp_path / "in" / "leak.jsonl")
    write(tmp_path / "in" / "_f1.jsonl", records(1))
    os.rename(tmp_path / "in" / "_f1.jsonl", tmp_path / "in" / "f1.jsonl")
    while len(_committed_ids(tmp_path)) < 2 * PER_FILE and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.5)  # 15 monitor intervals, several checkpoints: time to read a link
    req = bg.request(job.job_id, "STOP_WITH_SAVEPOINT", {"drain": False})
    assert req.status == "SUCCEEDED", req.error
    assert bg.result().status == "STOPPED"
    ids = _committed_ids(tmp_path)
    assert len(ids) == len(set(ids)) == 2 * PER_FILE, "a file was read twice or not at all"
    check_exactly_once(str(tmp_path / "out"), expected([0, 1]))
