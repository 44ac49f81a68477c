"""A toy backend: what adding one takes is this module and one line in the
registry (tests/unit/test_backend_traits.py, tests/privileged/test_toy_backend.py).

nftables, its rule set under tables of its own name: every trait but the name, the
description and the default pairs comes from NftLinear.
"""
from __future__ import annotations

import re

from fwbench.backends.nftables import NftLinear

NAME = "toy-nft"
TARGET = f"{__name__}:ToyNft"    # its registry line: REGISTRY[NAME] = TARGET


class ToyNft(NftLinear):
    name = NAME
    description = "nftables, the rule set in tables named toy_*"
    compared_with = {}    # NftLinear's are nftables' own

    def render(self, rs, ifs):
        return {f: re.sub(r"^table (\S+) (\S+) \{", r"table \1 toy_\2 {", text, flags=re.M)
                for f, text in super().render(rs, ifs).items()}
