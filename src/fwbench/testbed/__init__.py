"""The testbed: a topology description and the providers that build it.

Its names are imported when first used: the packet agent (testbed.packet_agent, started
in each end host for every verification) would otherwise pay for pydantic."""

__all__ = ["Topology", "TestbedSettings", "NETNS_PREFIX"]


def __getattr__(name: str):
    if name in __all__:
        from fwbench.testbed import topology
        return getattr(topology, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
