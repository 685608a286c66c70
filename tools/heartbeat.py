"""Run a command and print a line every few seconds until it ends: ``make demo`` installs
the venv for minutes on a fresh machine (pyspark builds from source), silence looks like a
hang. Standard library only: it runs with the system Python before the venv exists.

    python3 tools/heartbeat.py "installing the package" -- uv pip install ...

Prints ``    ... still <what> (<N> s)`` every ``$CKPT_HEARTBEAT_S`` seconds (default 10) on
stdout, then ``    done: <what> in <N> s`` (or ``failed``); exits with the command's code.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: heartbeat.py WHAT -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    what, cmd = argv[0], argv[2:]
    every = float(os.environ.get("CKPT_HEARTBEAT_S", "10"))
    t0 = time.monotonic()
    done = threading.Event()

    def beat() -> None:
        while not done.wait(every):
            print(f"    ... still {what} ({time.monotonic() - t0:.0f} s)", flush=True)

    print(f"    {what} ...", flush=True)
    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        rc = subprocess.call(cmd)
    finally:
        done.set()
        thread.join()
    print(f"    {'done' if rc == 0 else 'failed'}: {what} in {time.monotonic() - t0:.0f} s",
          flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
