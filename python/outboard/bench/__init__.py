"""Benchmarks behind ``outboard bench``: peers run side by side in one process, distinct payloads,
percentiles, correctness checked on the timed data."""
