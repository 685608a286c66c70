"""sensors of the Airflow provider."""
