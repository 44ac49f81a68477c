"""iptables-restore and iptables-save text compared table by table, for the tests
that hold a rendering against what the kernel saved back."""


def by_table(text: str) -> dict[str, list[str]]:
    """Restore or save text as {table: its chain and rule lines}, without comment
    lines and COMMIT, chain counters read as [0:0]: iptables-save lists tables in
    an order of its own (legacy: as the kernel loaded them) and prints the chains'
    live counters, so a rendering and a save compare table by table."""
    out: dict[str, list[str]] = {}
    lines: list[str] = []
    for line in text.splitlines():
        if not line or line.startswith("#") or line == "COMMIT":
            continue
        if line.startswith("*"):
            lines = out.setdefault(line[1:], [])
        elif line.startswith(":"):
            lines.append(line[:line.rindex("[")] + "[0:0]")
        else:
            lines.append(line)
    return out
