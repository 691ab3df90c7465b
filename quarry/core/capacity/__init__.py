"""Capacity: per-call arithmetic, workload profiles, distributions from traces."""
