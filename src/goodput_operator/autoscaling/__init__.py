"""PURE autoscaling algorithm (algorithm.py); the Prometheus HTTP client sits at its edge
(prometheus.py, the only module here that does I/O)."""
