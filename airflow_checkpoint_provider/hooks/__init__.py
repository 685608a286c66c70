"""hooks of the Airflow provider."""
