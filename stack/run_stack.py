"""`make stack`: the docker-compose services without Docker, wired the same way, for real.

Starts PostgreSQL (metadata DB), an S3 server (moto_server; MinIO in docker/), and a Spark
standalone cluster with two workers, all on 127.0.0.1; starts the "blue" job (v1) on the
cluster with checkpoints and savepoints on S3; runs the `blue_green_upgrade` DAG with
`airflow dags test` against them; checks the outcome in the metadata DB (blue STOPPED with
a savepoint, green RUNNING restored from blue's savepoint); stops everything it started.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))

from pg_server import PostgresServer  # noqa: E402
from s3_server import MotoServer  # noqa: E402
from spark_cluster import StandaloneCluster  # noqa: E402

from airflow_checkpoint_provider.engine.catalog import MetadataStore  # noqa: E402

BIN = os.path.dirname(sys.executable)


def run(cmd: list[str], env: dict, timeout: float) -> subprocess.CompletedProcess:
    print("+", " ".join(cmd), flush=True)
    return subprocess.run(cmd, env=env, timeout=timeout, text=True)


def main() -> int:
    work = tempfile.mkdtemp(prefix="ckpt-stack-")
    started = []
    try:
        pg = PostgresServer().start()
        started.append(pg)
        db_url = pg.create_database()
        s3 = MotoServer(os.path.join(work, "moto.log")).start()
        started.append(s3)
        os.makedirs(os.path.join(work, "spark"))
        spark = StandaloneCluster(os.path.join(work, "spark")).start()
        started.append(spark)
        import boto3

        env = dict(os.environ)
        env.update({
            "SPARK_LOCAL_IP": "127.0.0.1", "PATH": f"{BIN}:{env.get('PATH', '')}",
            "CKPT_METADATA_URL": db_url, "CKPT_S3_ENDPOINT_URL": s3.endpoint_url,
            "AWS_ACCESS_KEY_ID": "stack", "AWS_SECRET_ACCESS_KEY": "stack",
            "AWS_DEFAULT_REGION": "us-east-1",
            "CKPT_EXAMPLE_DIR": os.path.join(work, "jobs"), "CKPT_EXAMPLE_RATE": "200",
            "AIRFLOW_HOME": os.path.join(work, "airflow"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": os.path.join(ROOT, "dags"),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{work}/airflow/airflow.db",
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "spark://127.0.0.1",
                                                      "port": spark.port}),
            "AIRFLOW_CONN_CHECKPOINT_METADATA_DEFAULT": json.dumps(
                {"conn_type": "checkpoint_metadata", "extra": {"url": db_url}}),
        })
        boto3.client("s3", endpoint_url=s3.endpoint_url, region_name="us-east-1",
                     aws_access_key_id="stack", aws_secret_access_key="stack").create_bucket(
            Bucket="checkpoints")
        os.makedirs(env["AIRFLOW_HOME"], exist_ok=True)
        if run([f"{BIN}/airflow", "db", "migrate"], env, 300).returncode:
            return 1
        blue = subprocess.run(
            [f"{BIN}/ckpt", "run", "airflow_checkpoint_provider.examples.versioned_sum:build_v1",
             "--runner", "spark", "--master", spark.url, "--job-name", "versioned-sum-blue",
             "--checkpoint-dir", "s3://checkpoints/ckpt", "--savepoint-dir", "s3://checkpoints/savepoints",
             "--db", db_url, "--detach", "--json", "--log-file", os.path.join(work, "blue.log")],
            env=env, text=True, capture_output=True, timeout=300)
        print(blue.stdout, blue.stderr, flush=True)
        if blue.returncode:
            return 1
        conf = {"blue_job": "versioned-sum-blue", "green_job": "versioned-sum-green",
                "green_pipeline": "airflow_checkpoint_provider.examples.versioned_sum:build_v2",
                # empty: blue's own savepoint directory (--savepoint-dir above, on S3); a
                # run's conf names no path outside the DAG's roots
                "savepoint_dir": "", "runner": "spark", "job_env": {}, "min_checkpoints": 2}
        rc = run([f"{BIN}/airflow", "dags", "test", "blue_green_upgrade", "-c", json.dumps(conf)],
                 env, 900).returncode
        store = MetadataStore(db_url)
        blue_job = store.resolve_job("versioned-sum-blue")
        green_job = store.resolve_job("versioned-sum-green")
        print(f"blue  {blue_job.job_id} {blue_job.status}\ngreen {green_job.job_id} {green_job.status} "
              f"restored from {green_job.restored_from}", flush=True)
        ok = (rc == 0 and blue_job.status == "STOPPED" and green_job.status == "RUNNING"
              and (green_job.restored_from or "").startswith("s3://checkpoints/savepoints/"))
        subprocess.run([f"{BIN}/ckpt", "cancel", green_job.job_id, "--db", db_url], env=env,
                       timeout=120)
        print("make stack:", "OK" if ok else "FAILED", flush=True)
        return 0 if ok else 1
    finally:
        for server in reversed(started):
            if server is not None:
                server.stop()


if __name__ == "__main__":
    sys.exit(main())
