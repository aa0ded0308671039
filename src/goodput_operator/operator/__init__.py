"""The running operator process (entrypoint, settings, health and metrics endpoints)."""
