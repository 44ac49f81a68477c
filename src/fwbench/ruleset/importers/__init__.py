"""Importers: a user's own rule set (iptables-save text, nft JSON or text) into the
model, with interface names mapped onto the testbed's and addresses outside the
benchmarking ranges remapped into them."""
