"""Measurement methods. Each turns one trial's traffic into metrics."""
