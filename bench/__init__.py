"""Benchmarks for kproducer."""
