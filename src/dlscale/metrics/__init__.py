"""Measurement: throughput statistics, device peaks, run records."""
