"""Seed 004's experiment: latency through the firewall with and without
bidirectional TCP load, for forwarding and NAT rule sets (`method = "loadlatency"`)."""
