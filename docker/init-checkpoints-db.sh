#!/bin/bash
# Creates the checkpoint metadata DB beside Airflow's own (never the same database).
set -euo pipefail
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" <<SQL
CREATE ROLE ckpt LOGIN PASSWORD '${CKPT_DB_PASSWORD}';
CREATE DATABASE checkpoints OWNER ckpt;
SQL
