"""The testbed: a topology description and the providers that build it."""
from fwbench.testbed.topology import Topology, TestbedSettings, NETNS_PREFIX

__all__ = ["Topology", "TestbedSettings", "NETNS_PREFIX"]
