"""airflow-checkpoint-provider."""
