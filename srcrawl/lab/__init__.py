"""Code for tests and benchmarks only: a Redis Cluster on loopback and generated pages.
Only tests/ and benchmarks/ import it (tests/test_architecture.py checks)."""
