"""Downtime of upgrades and cut-overs: the output gap and where the time goes (issue 41).

    .venv/bin/python bench/downtime.py [--runner local|spark] [--master local[2]]
        [--scenarios savepoint,savepoint-standby,last-state,blue-green,blue-green-in-place]
        [--reps 2]
        [--records 12000] [--rate 200] [--label before] [--cluster [--workers 2]]

Every job is the ``versioned_sum`` example started the way a deployment starts it: ``ckpt
run --detach`` in its own process (with ``--runner spark`` that is a new Spark application
each time), steered through the metadata DB (control requests), as the DAGs' operators do.
The input is bounded (``--records`` at ``--rate`` records/s), so the last job finishes and
its committed output is checked against the failure-free result: per key the running counts
must be 1..n exactly once (``lost`` = counts missing, ``duplicated`` = counts seen twice).

Scenarios:

* ``savepoint``: v1 stops with a savepoint, v2 starts from it (a new application);
* ``savepoint-standby``: v2 is started first with ``--restore standby:<v1>``; once its
  application is up (it says ``READY`` in the metadata DB), v1 stops with a savepoint and v2
  restores it;
* ``last-state``: v1 is cancelled, v2 starts from v1's latest completed checkpoint;
* ``blue-green``: v2 runs fenced next to v1 (restored from a savepoint of v1); at the
  cut-over v1 stops with a savepoint, the fenced v2 is cancelled and v2 is submitted again
  unfenced from v1's final savepoint (the old path: a new application);
* ``blue-green-in-place``: the same until the cut-over; then the fenced v2 gets a
  ``PROMOTE`` control request: it restores v1's final savepoint inside its running
  application and publishes from there (no new submit).

Figures per run (seconds): ``output_gap`` = first commit of the new job minus last commit of
the old one (commit times are the FileSink's ``part-`` files' modification times: a part file
appears by the commit's rename); ``processing_gap`` = from the stop savepoint's trigger (the
sources stop reading there; for last-state the cancel request) until the new job is RUNNING;
the timeline: ``stop`` (request to SUCCEEDED/CANCELED), ``app_start`` (spawn of the new
process to its job row: interpreter, Spark application), ``slots`` (job row to RUNNING:
slot start-up and restore), ``first_checkpoint`` (RUNNING to the new job's first completed
checkpoint), ``promote`` (PROMOTE request to SUCCEEDED, in-place only). Airflow's own
scheduling latency is not in these figures (the DAGs add it between their tasks; see the
section in BENCHMARKS.md). Writes ``bench/results/downtime-<label>.json`` (this run) and
merges the runs into ``bench/results/downtime.json`` (per runner and scenario, with the
command and date), from which ``bench/write_benchmarks.py`` renders the section
(``bench/downtime_report.py``). ``--from-logs LOG ... --record`` merges the runs a
(possibly interrupted) run printed, with ``--command`` and ``--measured-on`` saying how and
when they were measured; with ``--runner airflow`` those are the lines the real-deployment
tests printed (``pytest -s``; issue 54): the blue-green cut-over through Airflow
(``tests/deployment/cluster/test_postgres_blue_green_deployment.py``, scenario ``blue-green-in-place``)
and the savepoint upgrade with a standby (``tests/deployment/cluster/test_standby_upgrade_deployment.py``,
``savepoint-standby``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from airflow_checkpoint_provider.engine import GeneratorSource, read_committed  # noqa: E402
from airflow_checkpoint_provider.engine.client import MetadataStore  # noqa: E402
from bench.downtime_report import NAME as RESULTS_NAME  # noqa: E402
from bench.downtime_report import merge, summarize  # noqa: E402

EXAMPLE = "airflow_checkpoint_provider.examples.versioned_sum"
SCENARIOS = ("savepoint", "savepoint-standby", "last-state", "blue-green",
             "blue-green-in-place")
KEYS = 20
#: the rate of a job started after the cut-over: it finishes the bounded input quickly (the
#: promoted green keeps the rate it was started with)
FAST = 5000.0
TERMINAL = ("FINISHED", "STOPPED", "CANCELED", "FAILED", "LOST")


class Deployment:
    """One scenario's directory, metadata DB and job processes."""

    def __init__(self, root: str, *, runner: str, master: str | None, records: int,
                 rate: float, interval_ms: int = 500) -> None:
        self.root, self.runner, self.master = root, runner, master
        self.url = "sqlite:///" + os.path.join(root, "meta.db")
        self.env = dict(os.environ, CKPT_EXAMPLE_DIR=root, CKPT_EXAMPLE_RECORDS=str(records),
                        CKPT_EXAMPLE_RATE=str(rate), CKPT_EXAMPLE_KEYS=str(KEYS),
                        CKPT_EXAMPLE_INTERVAL_MS=str(interval_ms), CKPT_METADATA_URL=self.url,
                        PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]),
                        SPARK_LOCAL_IP="127.0.0.1")
        self.records = records
        self._store: MetadataStore | None = None

    @property
    def store(self) -> MetadataStore:
        if self._store is None:
            self._store = MetadataStore(self.url)
        return self._store

    def start(self, version: str, name: str, *, restore: str | None = None,
              fenced: bool = False, rate: float | None = None) -> dict:
        """``ckpt run --detach``; returns the job id and when the process was spawned and
        when the job was RUNNING (the detach call returned)."""
        job_id = os.urandom(16).hex()
        argv = [sys.executable, "-m", "airflow_checkpoint_provider.engine.cli", "run",
                f"{EXAMPLE}:build_{version}", "--detach", "--job-id", job_id, "--job-name",
                name, "--runner", self.runner, "--no-progress", "--wait-timeout", "600",
                "--log-file", os.path.join(self.root, f"{name}-{job_id[:8]}.log")]
        if self.master:
            argv += ["--master", self.master]
        if restore:
            argv += ["--restore", restore]
        if fenced:
            argv.append("--fence-sinks")
        spawned = time.time()
        env = dict(self.env, **({"CKPT_EXAMPLE_RATE": str(rate)} if rate else {}))
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
        started = {"job_id": job_id, "spawned": spawned, "proc": proc,
                   "log": argv[argv.index("--log-file") + 1]}
        if restore and restore.startswith("standby:"):
            return started  # the caller waits for the standby's application, then stops v1
        return self.running(started)

    def running(self, started: dict) -> dict:
        """Wait until the started job is RUNNING (or already FINISHED) and its ``ckpt run
        --detach`` returned."""
        running = self.wait_status(started["job_id"], ("RUNNING", "FINISHED"), timeout=900)
        proc = started.pop("proc")
        out, _ = proc.communicate(timeout=900)
        if proc.returncode != 0:
            raise RuntimeError(f"ckpt run failed: {out[-3000:]}")
        return {**started, "running": running}

    def wait_standby(self, started: dict, timeout: float = 600.0) -> float:
        """When the standby said ``READY`` in the metadata DB (its row in ``standbys``, under
        the job id it will run as: its application is up and it only waits for v1)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            standby = self.store.get_standby(started["job_id"])
            if standby is not None and standby.is_ready:
                return standby.ready_at.timestamp()
            if standby is not None and standby.is_terminal:
                raise RuntimeError(f"standby {standby.status}: {standby.detail}")
            if started["proc"].poll() not in (None, 0):
                raise RuntimeError(f"standby exited: {started['proc'].stdout.read()[-3000:]}")
            time.sleep(0.05)
        raise RuntimeError("the standby's application did not come up")

    def request(self, job_id: str, action: str, params: dict | None = None,
                timeout: float = 300.0) -> tuple[dict, float, float]:
        """Submit a control request and wait for its end: (result, submitted, answered)."""
        submitted = time.time()
        rid = self.store.submit_control_request(job_id, action, params or {})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            req = self.store.get_control_request(rid)
            if req.status == "SUCCEEDED":
                return req.result or {}, submitted, time.time()
            if req.status == "FAILED":
                raise RuntimeError(f"{action} of {job_id} failed: {req.error}")
            time.sleep(0.02)
        raise RuntimeError(f"{action} of {job_id} not answered within {timeout:.0f} s")

    def wait_status(self, job_id: str, statuses: tuple[str, ...], timeout: float = 600.0) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                job = self.store.get_job(job_id)
            except Exception:  # noqa: BLE001 - the DB may not be initialized yet
                job = None
            if job is not None and job.status in statuses:
                return time.time()
            if job is not None and job.status in TERMINAL:
                raise RuntimeError(f"job {job_id} ended {job.status}: {job.failure_reason}")
            time.sleep(0.02)
        raise RuntimeError(f"job {job_id} not {statuses} within {timeout:.0f} s")

    def completed(self, job_id: str) -> list:
        return [c for c in self.store.list_checkpoints(job_id)
                if c.status in ("COMPLETED", "SUBSUMED") and c.complete_time is not None]

    def wait_checkpoints(self, job_id: str, n: int, timeout: float = 300.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.completed(job_id)) < n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"job {job_id}: fewer than {n} checkpoints")
            time.sleep(0.05)

    def commit_times(self, job_id: str) -> list[float]:
        """Modification times of the part files the job's transactions published."""
        out = os.path.join(self.root, "output")
        return sorted(os.stat(os.path.join(out, n)).st_mtime for n in os.listdir(out)
                      if n.startswith("part-") and f"~{job_id}~" in n)

    def created(self, job_id: str) -> float:
        return self.store.get_job(job_id).created_at.timestamp()

    def counts(self) -> dict:
        """Lost and duplicated rows of the committed output against the failure-free run
        (per key the running count goes 1..n once; n from the bounded generator)."""
        src = GeneratorSource(self.records, num_keys=KEYS, seed=42, splits=2)
        expected = Counter(src.record(i)["key"] for i in range(self.records))
        seen: dict[str, Counter] = defaultdict(Counter)
        for r in read_committed(os.path.join(self.root, "output")):
            seen[r["key"]][r["count"]] += 1
        dup = sum(n - 1 for c in seen.values() for n in c.values() if n > 1)
        lost = sum(1 for k, n in expected.items() for i in range(1, n + 1) if i not in seen[k])
        extra = sum(1 for k, c in seen.items() for i in c if i > expected.get(k, 0))
        return {"lost": lost, "duplicated": dup, "unexpected": extra,
                "rows": sum(sum(c.values()) for c in seen.values())}

    def close(self) -> None:
        if self._store is not None:
            self._store.close()


def _timeline(d: Deployment, old: str, new: dict, *, stop_trigger: float, stop: float,
              stopped: float) -> dict:
    old_commits, new_commits = d.commit_times(old), d.commit_times(new["job_id"])
    first_chk = min(c.complete_time.timestamp() for c in d.completed(new["job_id"])
                    if c.complete_time.timestamp() >= new["running"])  # not a fenced one
    return {
        "output_gap": round(new_commits[0] - old_commits[-1], 3),
        "processing_gap": round(new["running"] - stop_trigger, 3),
        "stop": round(stopped - stop, 3),
        "app_start": round(d.created(new["job_id"]) - new["spawned"], 3),
        "slots": round(new["running"] - d.created(new["job_id"]), 3),
        "first_checkpoint": round(first_chk - new["running"], 3),
        "first_commit_after_running": round(new_commits[0] - new["running"], 3),
    }


def savepoint_upgrade(d: Deployment, *, last_state: bool = False, standby: bool = False) -> dict:
    v1 = d.start("v1", "versioned-sum")
    d.wait_checkpoints(v1["job_id"], 4)
    v2 = None
    if standby:  # v2's application is up and waiting before v1 stops
        v2 = d.start("v2", "versioned-sum", restore=f"standby:{v1['job_id']}", rate=FAST)
        d.wait_standby(v2)
    if last_state:
        # the operator cancels, then hands over the latest completed checkpoint
        _, t_req, _ = d.request(v1["job_id"], "CANCEL")
        stopped = d.wait_status(v1["job_id"], ("CANCELED",))
        location = max(d.completed(v1["job_id"]), key=lambda c: c.checkpoint_id).location
        stop_trigger = t_req
    else:
        result, t_req, stopped = d.request(v1["job_id"], "STOP_WITH_SAVEPOINT")
        location = result["location"]
        d.wait_status(v1["job_id"], ("STOPPED",))
        sp = next(c for c in d.store.list_checkpoints(v1["job_id"])
                  if c.checkpoint_id == result["checkpoint_id"])
        stop_trigger = sp.trigger_time.timestamp()
    v2 = d.running(v2) if v2 else d.start("v2", "versioned-sum", restore=location, rate=FAST)
    d.wait_checkpoints(v2["job_id"], 1)
    d.wait_status(v2["job_id"], ("FINISHED",))
    out = _timeline(d, v1["job_id"], v2, stop_trigger=stop_trigger, stop=t_req, stopped=stopped)
    if standby:  # its application started before the stop: not part of the gap
        out["app_start"] = 0.0
    return out


def blue_green(d: Deployment, *, in_place: bool) -> dict:
    blue = d.start("v1", "vs-blue")
    d.wait_checkpoints(blue["job_id"], 2)
    sp, _, _ = d.request(blue["job_id"], "SAVEPOINT")
    green = d.start("v2", "vs-green", restore=sp["location"], fenced=True)
    d.wait_checkpoints(green["job_id"], 3)
    final, t_req, stopped = d.request(blue["job_id"], "STOP_WITH_SAVEPOINT")
    chk = next(c for c in d.store.list_checkpoints(blue["job_id"])
               if c.checkpoint_id == final["checkpoint_id"])
    extra: dict = {}
    if in_place:
        _, t_promote, promoted = d.request(green["job_id"], "PROMOTE",
                                           {"snapshot": final["location"], "unfence": True})
        live = {"job_id": green["job_id"], "spawned": t_promote,
                "running": d.store.get_job(green["job_id"]).updated_at.timestamp()}
        extra = {"promote": round(promoted - t_promote, 3)}
    else:
        _, t_cancel, cancelled = d.request(green["job_id"], "CANCEL")
        d.wait_status(green["job_id"], ("CANCELED",))
        extra = {"cancel_fenced": round(time.time() - t_cancel, 3)}
        live = d.start("v2", "vs-green", restore=final["location"], rate=FAST)
    deadline = time.monotonic() + 300  # a checkpoint of the live job (not a fenced one)
    while not [c for c in d.completed(live["job_id"])
               if c.complete_time.timestamp() >= live["running"]]:
        if time.monotonic() > deadline:
            raise RuntimeError(f"job {live['job_id']}: no checkpoint after going live")
        time.sleep(0.05)
    d.wait_status(live["job_id"], ("FINISHED",))
    out = _timeline(d, blue["job_id"], live, stop_trigger=chk.trigger_time.timestamp(),
                    stop=t_req, stopped=stopped)
    if in_place:  # no new application: the job row is the fenced green's
        out["app_start"] = 0.0
        out["slots"] = extra["promote"]
    return {**out, **extra}


def run(scenario: str, args) -> dict:
    root = tempfile.mkdtemp(prefix=f"downtime-{scenario}-")
    d = Deployment(root, runner=args.runner, master=args.master, records=args.records,
                   rate=args.rate)
    try:
        if scenario in ("savepoint", "last-state", "savepoint-standby"):
            res = savepoint_upgrade(d, last_state=scenario == "last-state",
                                    standby=scenario == "savepoint-standby")
        else:
            res = blue_green(d, in_place=scenario == "blue-green-in-place")
        res["load"] = round(os.getloadavg()[0], 1)  # at the end of the cut-over's run
        res.update(d.counts())
        return res
    finally:
        d.close()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


def table(results: dict) -> str:
    cols = ["output_gap", "processing_gap", "stop", "app_start", "slots", "first_checkpoint",
            "first_commit_after_running"]
    lines = ["| scenario | runs | " + " | ".join(c.replace("_", " ") + " s p50 / max"
                                                 for c in cols) + " | lost / duplicated |",
             "|---" * (len(cols) + 3) + "|"]
    for name, r in results.items():
        s = r["summary"]
        lost = sum(x["lost"] for x in r["runs"])
        dup = sum(x["duplicated"] + x["unexpected"] for x in r["runs"])
        lines.append(f"| {name} | {len(r['runs'])} | " + " | ".join(
            f"{s[c]['p50']:.1f} / {s[c]['max']:.1f}" if c in s else "-"  # not measured
            for c in cols) + f" | {lost} / {dup} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    # airflow: only with --from-logs --record (the runs tests/deployment/cluster printed)
    ap.add_argument("--runner", default="local", choices=["local", "spark", "airflow"])
    ap.add_argument("--master", default=None, help="Spark master (runner spark)")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--records", type=int, default=12000)
    ap.add_argument("--rate", type=float, default=200.0)
    ap.add_argument("--label", default="before")
    ap.add_argument("--keep", action="store_true", help="keep the run directories")
    ap.add_argument("--cluster", action="store_true",
                    help="start a Spark standalone cluster on 127.0.0.1 (tests/support/spark_cluster.py: "
                         "--workers workers, 1 core each) and run every job on it")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--from-logs", nargs="+", default=None,
                    help="print the table of earlier runs from their printed lines and stop")
    ap.add_argument("--record", action="store_true",
                    help="with --from-logs: merge those runs into bench/results/downtime.json "
                         "(under --runner, or cluster with --cluster)")
    ap.add_argument("--command", default=None,
                    help="with --record: the command that measured the logged runs")
    ap.add_argument("--measured-on", default=None,
                    help="with --record: the date (YYYY-MM-DD) of the logged runs")
    ap.add_argument("--results-dir", default=os.path.join(ROOT, "bench", "results"))
    args = ap.parse_args()
    if args.runner == "airflow" and not args.from_logs:
        ap.error("--runner airflow records the runs tests/deployment/cluster printed: use --from-logs")
    if args.from_logs:
        results = results_from_logs(args.from_logs)
        print(table(results))
        if args.record:
            if not (args.command and args.measured_on):
                ap.error("--record needs --command and --measured-on")
            merge(os.path.join(args.results_dir, RESULTS_NAME),
                  "cluster" if args.cluster else args.runner, results, command=args.command,
                  # the deployment test's input is its own (unbounded, 50 records/s)
                  records=0 if args.runner == "airflow" else args.records,
                  rate=0 if args.runner == "airflow" else args.rate,
                  measured_on=args.measured_on)
        return
    cluster = None
    if args.cluster:
        sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
        from spark_cluster import StandaloneCluster

        workdir = tempfile.mkdtemp(prefix="downtime-cluster-")
        cluster = StandaloneCluster(workdir, workers=args.workers, cores=1, memory="1g")
        try:
            try:
                cluster.start()
            except RuntimeError as exc:  # a loaded machine: give the workers longer
                if "did not register" not in str(exc):
                    raise
                _wait_workers(workdir, args.workers, 180)
        except BaseException:
            cluster.stop()  # the processes it started, by PID
            raise
        args.runner, args.master = "spark", cluster.url
        # one core and a small executor per application: blue and green run side by side
        os.environ["PYSPARK_SUBMIT_ARGS"] = ("--conf spark.cores.max=1 --conf "
                                             "spark.executor.memory=512m pyspark-shell")
    try:
        results = _run_all(args)
    finally:
        if cluster is not None:
            cluster.stop()
    runner = "cluster" if cluster else args.runner
    os.makedirs(args.results_dir, exist_ok=True)
    with open(os.path.join(args.results_dir, f"downtime-{args.label}-{runner}.json"), "w") as f:
        json.dump({"runner": args.runner, "master": args.master, "records": args.records,
                   "rate": args.rate, "results": results}, f, indent=1)
    merge(os.path.join(args.results_dir, RESULTS_NAME), runner, results,
          command=shlex.join([".venv/bin/python", "bench/downtime.py", *sys.argv[1:]]),
          records=args.records, rate=args.rate,
          measured_on=datetime.date.today().isoformat())
    print(table(results))


def _wait_workers(workdir: str, workers: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(os.path.join(workdir, "master.log"), errors="replace") as f:
            if f.read().count("Registering worker") >= workers:
                return
        time.sleep(0.5)
    raise RuntimeError(f"Spark workers did not register within {timeout:.0f} more seconds")


def results_from_logs(paths: list[str]) -> dict:
    """The ``<scenario> <rep> {json}`` lines this script printed, grouped by scenario."""
    runs: dict[str, list[dict]] = defaultdict(list)
    for path in paths:
        with open(path) as f:
            for line in f:
                parts = line.split(" ", 2)
                if len(parts) == 3 and parts[0] in SCENARIOS and parts[2].startswith("{"):
                    runs[parts[0]].append(json.loads(parts[2]))
    return {k: {"runs": v, "summary": summarize(v)} for k, v in runs.items()}


def _run_all(args) -> dict:
    results: dict = {}
    for scenario in args.scenarios.split(","):
        runs = []
        for rep in range(args.reps):
            r = run(scenario, args)
            print(scenario, rep, json.dumps(r), flush=True)
            runs.append(r)
        results[scenario] = {"runs": runs, "summary": summarize(runs)}
    return results


if __name__ == "__main__":
    main()
