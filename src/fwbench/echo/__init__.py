"""Seed 001: many clients echoing messages through the firewall."""
