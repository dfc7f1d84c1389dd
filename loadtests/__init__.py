"""locust load tests: `locustfile.py` (the users) and `run.py` (a headless run that prints figures)."""
