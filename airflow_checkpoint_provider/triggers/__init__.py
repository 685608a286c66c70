"""triggers of the Airflow provider."""
