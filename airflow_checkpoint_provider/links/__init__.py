"""links of the Airflow provider."""
