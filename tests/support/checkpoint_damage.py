"""Damage done to a job's newest completed checkpoint while it runs (shared by the restore
fallback tests; importable by slot processes, ``tests`` is on their ``sys.path``)."""

from __future__ import annotations

import os
import shutil
import time

from pipelines import InjectedFailure, RunningSum


def completed_chk_dirs(ckpt_root: str) -> list[str]:
    """Checkpoint directories with a ``_metadata`` file, oldest first."""
    found = []
    for dirpath, _dirs, files in os.walk(ckpt_root):
        name = os.path.basename(dirpath)
        if name.startswith("chk-") and "_metadata" in files:
            found.append((int(name[4:]), dirpath))
    return [d for _, d in sorted(found)]


def corrupt(chk_dir: str, kind: str) -> str:
    """Damage a checkpoint directory; return the name of the damaged file (or the dir)."""
    if kind == "truncate_metadata":
        meta = os.path.join(chk_dir, "_metadata")
        os.truncate(meta, os.path.getsize(meta) // 2)
        return "_metadata"
    if kind == "delete_chk_dir":
        shutil.rmtree(chk_dir)
        return os.path.basename(chk_dir)
    state = sorted(n for n in os.listdir(chk_dir) if n.endswith(".state"))[0]
    if kind == "flip_state_byte":
        with open(os.path.join(chk_dir, state), "r+b") as f:
            b = f.read(1)
            f.seek(0)
            f.write(bytes([b[0] ^ 0xFF]))
        return state
    if kind == "delete_state_file":
        os.remove(os.path.join(chk_dir, state))
        return state
    raise ValueError(f"unknown damage kind {kind!r}")


class CorruptLatest(RunningSum):
    """Once, at the first record >= ``at_id`` with two completed checkpoints: damage the
    newest completed checkpoint and fail the task (the job fails over or fails)."""

    def __init__(self, root: str, kind: str, at_id: int) -> None:
        super().__init__(None)
        self.root, self.kind, self.at_id = root, kind, at_id

    def process_element(self, record, ctx):
        if record["id"] >= self.at_id:
            marker = os.path.join(self.root, "corrupted")
            done = completed_chk_dirs(os.path.join(self.root, "ckpt"))
            if len(done) >= 2 and not os.path.exists(marker):
                try:  # one subtask of all wins
                    os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                except FileExistsError:
                    return super().process_element(record, ctx)
                # While this task is blocked here it acks no barrier, so no checkpoint triggered
                # from now on can complete; one it already acked may still be finalizing. Wait
                # for that, then damage the newest, so the damaged one is really the latest.
                time.sleep(1.0)
                done = completed_chk_dirs(os.path.join(self.root, "ckpt"))
                bad = corrupt(done[-1], self.kind)
                with open(marker + ".tmp", "w") as f:
                    f.write(f"{done[-1]}\n{bad}")
                os.replace(marker + ".tmp", marker + ".info")
                raise InjectedFailure(f"corrupted {done[-1]} ({self.kind})")
        return super().process_element(record, ctx)


def corrupted(root) -> tuple[str, str]:
    """(the checkpoint directory CorruptLatest damaged, the damaged file)."""
    with open(os.path.join(root, "corrupted.info")) as f:
        chk_dir, bad = f.read().split("\n")
    return chk_dir, bad
