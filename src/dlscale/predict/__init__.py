"""Predicted throughput and scaling efficiency at any device count (pure Python, no torch)."""
