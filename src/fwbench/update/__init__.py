"""Rule-set updates under traffic: how long a change takes to reach the kernel,
and what a fixed-rate flow sees while it happens (the `update` experiment)."""
