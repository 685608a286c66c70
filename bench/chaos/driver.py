"""The job's driver process of one chaos run (the process a ``driver`` kill SIGKILLs):
builds the cell's pipeline, runs it on the cell's runner and writes the result as JSON.

    python -m bench.chaos.driver --spec SPEC.json --result OUT.json [--restore latest]

Logs (the job master's checkpoint and attempt lines, with wall-clock times) go to stderr;
the harness sends them to ``driver-<n>.log`` in the run root.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spec", required=True)
    ap.add_argument("--result", required=True)
    ap.add_argument("--restore", default=None)
    args = ap.parse_args(argv)
    with open(args.spec) as f:
        spec = json.load(f)
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(created).3f %(levelname)s %(name)s %(message)s",
    )
    logging.getLogger("py4j").setLevel(logging.WARNING)

    from bench.chaos.catalogue import BuildContext, entry

    e = entry(spec["pipeline"])
    ctx = BuildContext(
        spec["root"],
        spec["backend"],
        spec["mode"] == "unaligned",
        list(spec.get("raise_points") or []),
        spec.get("extra") or {},
    )
    p = e.make(ctx)
    options: dict = {}
    if spec["runner"] == "spark":
        from airflow_checkpoint_provider.engine.client import spark_session

        options["spark"] = spark_session("local[4]", f"chaos-{e.name}")
    t0 = time.time()
    try:
        result = p.run(spec["runner"], restore=args.restore, **options)
        out = {
            "status": result.status,
            "restarts": result.restarts,
            "failure_reason": result.failure_reason,
            "job_id": result.job_id,
            "checkpoints_completed": result.checkpoints_completed,
            "restored_from": result.restored_from,
        }
    except Exception as exc:  # noqa: BLE001 - the harness reports it
        out = {"status": "ERROR", "failure_reason": f"{type(exc).__name__}: {exc}"[:4000]}
    out.update(started=t0, ended=time.time())
    tmp = args.result + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f)
    os.replace(tmp, args.result)
    if "spark" in options:
        options["spark"].stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
