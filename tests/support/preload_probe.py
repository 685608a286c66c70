"""Imported by the fork-server preload test: records which process imported it."""

import os

_path = os.environ.get("CKPT_TEST_PRELOAD_PROBE")
if _path:
    with open(_path, "a") as f:
        f.write(f"{os.getpid()}\n")
