"""operators of the Airflow provider."""
