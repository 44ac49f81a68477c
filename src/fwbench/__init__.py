"""fwbench: measure what a Linux firewall costs."""

__version__ = "0.1.0"
