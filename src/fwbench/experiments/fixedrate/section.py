"""`fwbench report` of a fixedrate run (seed 003): the degradation point per backend,
flow, chain and CPU count; iptables-legacy over nftables at 6,000 rules; INPUT over
FORWARD; the most CPUs over one; each CPU's softirq share where the rule set is
largest. The figures are fwbench.experiments.fixedrate.stats', which a study's findings read
too. Then every metric as any experiment has it (report.cells), each cell against
iptables-legacy's same cell.
"""
from __future__ import annotations

import warnings

from scipy.stats import DegenerateDataWarning

from fwbench.experiments.fixedrate import stats
from fwbench.report.cells import CellReport
from fwbench.report.data import RunData
from fwbench.report.document import Block, Heading, Para, Table

ADVANTAGE_RULES = 6000


def _ratio(r: stats.Ratio | None) -> str:
    if r is None:
        return "-"
    iv = f" [{r.interval[0]:.2f}, {r.interval[1]:.2f}]" if r.interval else " (one trial)"
    return f"{r.value:.2f}{iv}"


def _seed_degradation(backend: str, frame: int) -> str:
    family = "nftables" if backend == "nftables" else \
        "iptables" if backend.startswith("iptables") else None
    n = stats.SEED_DEGRADATION.get(family, {}).get(frame) if family else None
    return f"~{n:,}" if n else "-"


def _seed_ratio(frame: int) -> str:
    ipt, nft = (stats.SEED_DEGRADATION[k].get(frame) for k in ("iptables", "nftables"))
    return f"~{ipt / nft:.1f}" if ipt and nft else "-"


def lead(data: RunData) -> list[Block]:
    recs = stats.records_of(data)
    chains = sorted({stats.chain_of(r) for r in recs})
    cpus = sorted({stats.cpus_of(r) for r in recs})
    steer = next((r.conditions.get("steering") for r in recs
                  if r.conditions.get("steering")), None)
    out: list[Block] = [Heading(2, "Seed 003's figures", "seed003")]
    out.append(Para(
        f"Chains: {', '.join(chains)}; firewall CPUs: {', '.join(map(str, cpus))}. "
        "forward: the rules in FORWARD, the flow to the server, counted after the "
        "firewall by the engine's receiver on the server. input: the rules in INPUT, the "
        "flow to the firewall's own address; processed is the firewall's count of IPv4 "
        "packets past its input hook (IP InDelivers in its namespace), the engine's "
        "socket there receiving them. CPUs: RPS spreads the firewall's ingress over that "
        "many CPUs; it hashes a flow to one CPU, so only several flows (source ports) "
        "spread, and on a 2-CPU machine the second CPU is the sender's own."
        + (f" Example steering: CPUs {steer.get('cpus')}, mask {steer.get('mask')}."
           if steer else ""), "note"))

    pts = stats.degradation_points(data)
    rows = [[f"{f}", c, f"{k}", b, stats.bracket_text(d), _seed_degradation(b, f)]
            for (b, f, c, k), d in sorted(pts.items(), key=lambda kv: (
                kv[0][1], kv[0][2], kv[0][3], kv[0][0])) if b != "none"]
    out.append(Heading(3, "Where loss begins", "seed003-degradation"))
    out.append(Table(["frame B", "chain", "CPUs", "backend", "loss begins (rules)",
                      "seed 003"], rows,
                     "The last rule count that processed every packet and the first "
                     "that lost, from every count measured (grid and search), medians "
                     "over repetitions", id="seed003-degradation"))
    ratio = stats.degradation_ratio(data)
    if ratio:
        out.append(Table(
            ["frame B", "chain", "CPUs", "iptables-legacy / nftables [range]", "seed 003"],
            [[f"{f}", c, f"{k}", ("-" if r.value is None else f"{r.value:.1f}") +
              f" [{r.interval[0]:.1f}, {r.interval[1]:.1f}]",
              f"{_seed_ratio(f)}"] for (f, c, k), r in sorted(ratio.items())],
            "Where iptables-legacy begins to lose over where nftables does: the ratio of "
            "the brackets' geometric middles, and its whole range over the brackets",
            id="seed003-degradation-ratio"))

    adv = stats.advantage_at(data, ADVANTAGE_RULES)
    out.append(Heading(3, f"iptables-legacy over nftables at {ADVANTAGE_RULES:,} rules",
                       "seed003-advantage"))
    if adv:
        out.append(Table(
            ["frame B", "chain", "CPUs", "ratio [95 %]", "seed 003"],
            [[f"{f}", c, f"{k}", _ratio(r), f"{stats.SEED_ADVANTAGE_AT_6000.get(f, '-')}"]
             for (f, c, k), r in sorted(adv.items())],
            "Processed packets/s of iptables-legacy over nftables: ratio of geometric "
            "means over repetitions, Welch interval on the logarithms",
            id="seed003-advantage"))
    else:
        out.append(Para(f"This run has no {ADVANTAGE_RULES:,}-rule cells of both "
                        "iptables-legacy and nftables.", "note"))

    ivf = stats.input_vs_forward(data)
    if ivf:
        out.append(Heading(3, "INPUT over FORWARD", "seed003-input"))
        out.append(Table(["backend", "frame B", "CPUs", "ratio [95 %]"],
                         [[b, f"{f}", f"{k}", _ratio(r)] for (b, f, k), r in sorted(ivf.items())],
                         "Processed packets/s with the rules in INPUT over FORWARD at the "
                         "largest rule count both measured (seed 003: the same)",
                         id="seed003-input"))
    eff = stats.cpus_effect(data)
    if eff:
        out.append(Heading(3, f"{cpus[-1]} CPUs over {cpus[0]}", "seed003-cpus"))
        out.append(Table(["backend", "frame B", "chain", "ratio [95 %]"],
                         [[b, f"{f}", c, _ratio(r)] for (b, f, c), r in sorted(eff.items())],
                         "Processed packets/s at the largest rule count both measured "
                         "(seed 003: no difference between 1 and 4 vCPUs, one flow)",
                         id="seed003-cpus"))
    soft = stats.softirq_by_cpu(data)
    if soft:
        top = max(n for (_, n, _, _, _) in soft)
        cols = sorted({c for v in soft.values() for c in v}, key=int)
        out.append(Heading(3, "Softirq per CPU", "seed003-softirq"))
        out.append(Table(
            ["backend", "rules", "frame B", "chain", "CPUs", *[f"CPU {c}" for c in cols]],
            [[b, f"{n:,}", f"{f}", c, f"{k}", *[f"{v.get(x, 0):.0%}" for x in cols]]
             for (b, n, f, c, k), v in sorted(soft.items()) if n in (0, top)],
            "Median share of each CPU's time in softirq during the trial (/proc/stat, "
            "10 ms ticks), at the largest rule count and without rules; seed 003 saw "
            "one CPU near 100 % once loss began", id="seed003-softirq"))
    return out


def report(data: RunData) -> CellReport:
    # Loss is 0 in most reference cells and the flows' rates are exact below
    # degradation: the cell comparisons' ratios and bootstraps there are undefined,
    # which numpy and scipy would print as warnings in the middle of a run's output.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        warnings.simplefilter("ignore", DegenerateDataWarning)
        return CellReport(data, lead=lead(data), tests_note=(
            "Tests in the metric sections below: each cell against iptables-legacy's "
            "same cell (rules, frame, chain, CPUs), as a ratio on the log scale paired by "
            "round where both ran in the same rounds, with Holm's correction."))
