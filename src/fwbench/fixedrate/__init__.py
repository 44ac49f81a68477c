"""Seed 003 in full: its fixed-rate flows through the firewall forwarding (FORWARD)
and as the endpoint (INPUT), on one CPU and on two, and the figures its findings
are checked against (`stats`: degradation points, the iptables advantage at 6,000
rules, INPUT against FORWARD)."""
