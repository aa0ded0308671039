"""The SDC probe: the same deterministic matrix workload on every accelerator of a node,
compared across the accelerators (bit for bit) and with a float64 reference."""
