"""The command line: parses, calls, prints. Everything it does is callable from
Python (fwbench.experiments, fwbench.backends, fwbench.testbed.netns)."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from fwbench import __version__
from fwbench import backends as registry
from fwbench import catalog, jsonout
from fwbench.errors import FwbenchError

FRAME_HELP = ("Ethernet frame sizes in bytes, 4-byte FCS included, as RFC 2544 counts them "
              "(64..MTU+18): a 64-byte frame carries 18 bytes of UDP payload over IPv4, a "
              "1518-byte frame 1472")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not usage + line
        raise FwbenchError(f"{self.prog}: {message}")


def _int_list(text: str) -> list[int]:
    try:
        return [int(x.replace("_", "")) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")


def _str_list(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="fwbench", description="Measure what a Linux firewall costs.")
    p.add_argument("--version", action="version", version=f"fwbench {__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    r = sub.add_parser("run", help="run a scenario (or resume one)",
                       description="Run every trial of a scenario in seeded, interleaved order; "
                                   "each trial is written to OUT/trials.jsonl as it ends.")
    r.add_argument("scenario", nargs="?", help="scenario TOML file (flags override its keys)")
    r.add_argument("--backends", type=_str_list, help="comma-separated backend names, or 'all' "
                   f"(known: {', '.join(registry.names())})")
    r.add_argument("--rules", type=_int_list, help="comma-separated rule-set sizes N (>= 1)")
    r.add_argument("--frame-sizes", type=_int_list, help=FRAME_HELP)
    r.add_argument("--repeat", type=int, help="repetitions of every cell")
    r.add_argument("--duration", type=float, help="seconds of traffic measured per trial")
    r.add_argument("--seed", type=int, help="seed of the trial order")
    r.add_argument("--method",  # checked by the scenario schema, like every key
                   help="; ".join(f"{m}: {room.help}" for m, room in catalog.rooms().items()))
    r.add_argument("--traffic",
                   help="engine: fwbench's own paced sender + XDP sink (default); "
                        "iperf3: seed 000's instruments (maxrate only)")
    r.add_argument("--max-repeat", type=int, metavar="N",
                   help="adaptive repetitions: after --repeat rounds, repeat the cells whose "
                        "headline interval is still wider than [adaptive] rel_width (5 %% "
                        "of the median), up to N trials per cell; 0: off")
    r.add_argument("--family", help="ipv4 (default) or ipv6: the rule set's and the "
                   "measured flow's IP version")
    r.add_argument("--full", action="store_true", default=None,
                   help="echo: run the seed's full design (every combination of the "
                        "scenario's [echo] lists) instead of its default designs; the "
                        "estimated time is printed before it starts")
    r.add_argument("--ruleset", metavar="FILE",
                   help="benchmark this rule set (iptables-save text, nft JSON or nft "
                        "text) on every backend that can hold it, instead of seed 000's")
    r.add_argument("--iface", help="with --ruleset: its interfaces on the testbed, "
                   "e.g. eth0=client,eth1=server")
    r.add_argument("--ipsets", metavar="FILE", help="with --ruleset: `ipset save` output "
                   "of its sets")
    r.add_argument("--flow", help="with --ruleset: the measured flow, udp:PORT or a rule "
                   "id (default: the accepted flow that traverses the most rules)")
    r.add_argument("--inventory", metavar="FILE",
                   help="run on real hosts over SSH: the inventory naming the client, "
                        "firewall and server (the ssh provider; `fwbench lab up` makes "
                        "a local one)")
    r.add_argument("--out", help="results directory (default results/<name>-<time>)")
    r.add_argument("--resume", metavar="DIR",
                   help="finish an interrupted run in DIR; takes no other options")

    r.add_argument("--no-report", action="store_true",
                   help="do not write report.html at the end (make it later with "
                        "`fwbench report DIR`)")

    rp = sub.add_parser("report", help="write report.html, report.md and CSV tables for a run",
                        description="Figures, seed 000's tables with p-values, the cost per "
                                    "rule, warnings and plain conclusions, from a run "
                                    "directory's trials.jsonl.")
    rp.add_argument("run", help="the run directory (holds run.json and trials.jsonl)")
    rp.add_argument("--out", help="where to write (default: the run directory)")
    rp.add_argument("--pair", action="append", metavar="A:B",
                    help="compare backends A and B cell by cell (repeatable; default "
                         "iptables-legacy:nftables and ipset:nftset where present)")
    rp.add_argument("--link-gbps", type=float, default=10.0,
                    help="link speed whose line rate the rate-vs-frame-size figure draws "
                         "(Gbit/s, default 10)")

    cp = sub.add_parser("compare", help="compare two runs cell by cell (before/after)",
                        description="The metrics both runs recorded, side by side per cell, "
                                    "with B's change against A and its significance.")
    cp.add_argument("run_a", help="the 'before' run directory")
    cp.add_argument("run_b", help="the 'after' run directory")
    cp.add_argument("--out", help="where to write compare.html/.md/.csv "
                                  "(default: RUN_B/compare-vs-<A>)")
    cp.add_argument("--normalise", action="store_true",
                    help="compare packet rates as fractions of each run's own none backend "
                         "in the same round, so runs made in different machine states "
                         "compare")

    ck = sub.add_parser(
        "check", help="prove every backend gives a rule set's verdicts (for real)",
        description="Build a packet corpus from the rule set, send it through each "
                    "backend in a testbed and compare what was forwarded, translated and "
                    "counted with the reference evaluator and between backends. Exit 1 "
                    "on any disagreement.")
    ck.add_argument("ruleset", nargs="?", help="iptables-save text, nft JSON or nft text")
    ck.add_argument("--template", help="a template instead of a file: "
                    "seed000, seed001, seed004-forward, seed004-nat, droprate, random")
    ck.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                    help="a template setting, e.g. --param n=1000 (repeatable)")
    ck.add_argument("--backends", type=_str_list,
                    help="backends to check (default: every one here that holds the set)")
    ck.add_argument("--iface", help="interface map of an imported set: eth0=client,eth1=server")
    ck.add_argument("--ipsets", help="`ipset save` output the imported rules' sets come from")
    ck.add_argument("--corpus", type=int, default=5000, help="packets in the corpus")
    ck.add_argument("--seed", type=int, default=0, help="seed of the corpus's random part")
    ck.add_argument("--coverage", action="store_true",
                    help="list, rule by rule, what the import holds of the file (imported "
                         "exactly, dropped with no effect on a verdict, refused, and why) "
                         "and the totals; no testbed. Exit 1 when a rule is refused")
    ck.add_argument("--json", nargs="?", const=jsonout.STDOUT, metavar="FILE",
                    help="every result as JSON: on stdout with no FILE (the human text "
                         "then goes to stderr), else into FILE. `--json RULESET` with "
                         "no other rule set or --template reads RULESET as the rule "
                         "set and prints the JSON")

    bk = sub.add_parser("backends", help="list every backend with its version, or why it "
                                         "cannot run here")
    bk.add_argument("--json", action="store_true",
                    help="a JSON array on stdout instead of the table: per backend its "
                         "name, available, reason, versions and description")
    sd = sub.add_parser(
        "study", help="reproduce one of the five studies (or all) and check its findings",
        description="Run a study's scenario (the seed's design, scaled where its own time "
                    "is unreasonable) and write its report, which opens with the seed's "
                    "findings: each claim holds, does not hold or is not shown, with the "
                    "statistic behind it. `list` shows what each runs, its scale and "
                    "time; `all` runs the five and prints the total time. Into a "
                    "directory that holds the study's run already, it finishes that run.")
    sd.add_argument("study", help="000, 001, 002, 003, 004, all, or list")
    sd.add_argument("--out", help="the run directory (all: the directory of the five; "
                                  "default results/study-ID-<time>)")
    sd.add_argument("--json", nargs="?", const=jsonout.STDOUT, metavar="FILE",
                    help="list: the studies as JSON on stdout (or into FILE)")
    cl = sub.add_parser("clean", help="remove namespaces (and their processes) left by "
                                      "earlier runs, e.g. after SIGKILL")
    cl.add_argument("--inventory", metavar="FILE",
                    help="instead: put every host of this inventory back as a killed "
                         "run found it (its saved state) and end that run's processes")
    lb = sub.add_parser("lab", help="a three-host lab on this machine for the ssh "
                                    "provider: namespaces with their own sshd",
                        description="fwbench lab up DIR builds a client, a firewall and a "
                                    "server, each a network namespace running its own "
                                    "OpenSSH server, and writes DIR/inventory.toml for "
                                    "fwbench run --inventory; fwbench lab down DIR "
                                    "removes it.")
    lb.add_argument("action", choices=["up", "down"])
    lb.add_argument("dir", help="where the lab's keys, sshd configurations and "
                                "inventory.toml live")
    return p


def _need_root(what: str) -> None:
    if os.geteuid() != 0:
        raise FwbenchError(f"{what} must run as root: it builds network namespaces "
                           f"and loads firewall rules inside them")


def open_claims(meta: dict, records: list):
    """The report's open_claims, imported when a sequential study first asks (the
    report draws with matplotlib, which a run needs only at its end)."""
    from fwbench.report.findings import open_claims
    return open_claims(meta, records)


def cmd_run(args, out: Console, err: Console) -> int:
    from fwbench import scenario
    from fwbench.experiments import loop

    scenario_opts = {"backends": args.backends, "rules": args.rules,
                     "frame_sizes": args.frame_sizes, "repeat": args.repeat,
                     "duration_s": args.duration, "seed": args.seed,
                     "method": args.method, "traffic": args.traffic,
                     "adaptive.max_repeat": args.max_repeat, "family": args.family,
                     "policy.file": args.ruleset, "policy.iface": args.iface,
                     "policy.ipsets": args.ipsets, "policy.flow": args.flow,
                     "echo.full": args.full}
    if args.inventory:
        from fwbench.testbed import inventory
        inventory.load(args.inventory)      # a bad inventory is one line before anything
        scenario_opts.update({"testbed.provider": "ssh",
                              "testbed.inventory": str(Path(args.inventory).resolve())})
    if args.resume:
        if args.scenario or args.out or args.no_report or args.inventory or \
                any(v is not None for v in scenario_opts.values()):
            raise FwbenchError("--resume finishes a run as it was planned; "
                               "give it no scenario or other options")
        _need_root("fwbench run")
        path = Path(args.resume)
        target = lambda: loop.resume(path, err, open_claims)  # noqa: E731
    else:
        sc = scenario.load(args.scenario, scenario_opts)
        _need_root("fwbench run")
        path = Path(args.out) if args.out else loop.default_out(sc)
        target = lambda: loop.start(sc, path, err, open_claims)  # noqa: E731
    try:
        outcome = target()
    except (KeyboardInterrupt, loop.Interrupted):
        print(f"fwbench: interrupted; finished trials are in {path}/trials.jsonl; "
              f"finish with: fwbench run --resume {path}", file=sys.stderr)
        return 130
    # A table can be wider than a pipe's 80 columns; a terminal wraps it itself.
    wide = out if out.is_terminal else Console(width=max(out.width, 140))
    wide.print(outcome.summary)
    not_ok = sum(1 for r in outcome.records if r.status != "ok")
    print(f"{len(outcome.records)} of {outcome.planned} trials recorded"
          f"{f', {not_ok} not ok (see reason in trials.jsonl)' if not_ok else ''}.")
    print(f"results: {outcome.path}")
    if not args.no_report and \
            any(r.status == "ok" for r in outcome.records):
        from fwbench.report import build
        print(f"report: {build(outcome.path).html}")
    return 0 if not_ok == 0 else 1


def cmd_report(args, out: Console) -> int:
    from fwbench.report import build, parse_pairs

    files = build(args.run, args.out, parse_pairs(args.pair), args.link_gbps)
    out.print(f"{files.figures} figures, {len(files.csvs)} CSV tables; "
              f"markdown: {files.markdown}")
    print(f"report: {files.html}")
    return 0


def cmd_compare(args, out: Console) -> int:
    from fwbench.report.compare import compare_runs

    files = compare_runs(args.run_a, args.run_b, args.out, args.normalise)
    for s in files.sentences:
        out.print(f"- {s}", highlight=False)
    if not files.sentences:
        out.print("no cell differs between A and B at the corrected significance level")
    print(f"comparison: {files.html}")
    return 0


def check_json_target(args) -> None:
    """`--json` takes an optional FILE, so in `check --json gw.rules` argparse gives
    gw.rules to --json. A check needs a rule-set file or a template: with neither,
    that value was the rule set, and the JSON goes to stdout."""
    if args.json not in (None, jsonout.STDOUT) and args.ruleset is None \
            and args.template is None:
        args.ruleset, args.json = args.json, jsonout.STDOUT


def cmd_check(args, out: Console) -> int:
    from fwbench import check
    check_json_target(args)
    if jsonout.to_stdout(args.json):   # stdout holds the JSON document alone
        out = Console(stderr=True)
    if args.coverage:
        return _coverage(args, out)
    rs = check.ruleset_from(path=args.ruleset, template=args.template,
                            params=check.template_params(args.param), iface=args.iface,
                            ipsets=args.ipsets)
    if args.corpus < 1:
        raise FwbenchError("--corpus must be at least 1")
    # A file's own original is checked against the reference even where no
    # backend can hold its import.
    chosen, skipped = check.resolve(rs, args.backends, allow_none=args.ruleset is not None)
    out.print(f"rule set {rs.name}: {rs.rule_count:,} rules, "
              f"{sum(len(s.elements) for t in rs.tables for s in t.sets):,} set elements")
    for orig, mapped in rs.address_map:
        out.print(f"  address {orig} -> {mapped}")
    for note in rs.notes:
        out.print(f"  note: {note}", markup=False, soft_wrap=True)
    for name, why in skipped.items():
        out.print(f"[yellow]skipping {name}: {why}[/]")
    original = check.original_of(args.ruleset, args.ipsets)
    report = check.check(rs, chosen, args.corpus, args.seed,
                         progress=lambda m: out.print(f"  {m}"), original=original)
    for r in report.results:
        if r.refused is not None:
            out.print(f"[red]{r.backend}: NOT LOADED[/]: {escape(r.refused)}")
            continue
        mark = "[green]ok[/]" if r.disagreements == 0 else "[red]DISAGREES[/]"
        out.print(f"{r.backend}: {r.packets:,} packets, {r.forwarded:,} forwarded, "
                  f"{r.disagreements} disagreements, {r.seconds:.1f} s  {mark}")
        if r.chances is not None:
            tested = sum(1 for g in r.chances.groups if "p_value" in g)
            out.print(f"    random choices: {tested} of {len(r.chances.groups)} groups "
                      f"tested, chi-square at level {r.chances.level} (Bonferroni), "
                      f"{len(r.chances.failed)} rejected", soft_wrap=True)
        for line in (r.kernel + r.per_packet + r.per_rule
                     + (r.chances.failed if r.chances else []))[:check.SHOWN]:
            out.print(f"    {line}", markup=False, soft_wrap=True)   # one line each
        if r.disagreements > check.SHOWN:
            out.print(f"    ... and {r.disagreements - check.SHOWN} more")
    if report.limited:
        out.print(f"{report.limited:,} packets not judged: they reach a rate limit or "
                  f"quota (rules {', '.join(report.limit_rules)}), which each "
                  f"kernel spends at its own time")
    if report.own_only:
        out.print(f"counters not judged: rules {', '.join(report.own_only)} (only the "
                  f"firewall's own packets reach them: an input interface not the "
                  f"testbed's, the output hook)", highlight=False)
    if report.at_least:
        out.print(f"counters judged as at least the corpus's: rules "
                  f"{', '.join(report.at_least)} (the firewall's own packets pass the "
                  f"postrouting hook and the chains output jumps to)", highlight=False)
    if report.counter_choices:
        out.print(f"{report.counter_choices:,} packets reach a packet counter (statistic "
                  f"nth, numgen inc): either verdict is allowed, as which one they get "
                  f"depends on the packets the rule saw before")
    for line in report.between[:check.SHOWN]:
        out.print(f"  between backends: {line}", markup=False, soft_wrap=True)
    if args.json:
        jsonout.emit({**report.as_dict(), "skipped": skipped}, args.json)
    agree = "the original and all backends agree" if original else "all backends agree"
    out.print(f"{agree} with the reference" if report.ok else "[red]disagreements found[/]")
    return 0 if report.ok else 1


def _coverage(args, out: Console) -> int:
    """`check FILE --coverage`: the import's listing, rule by rule."""
    from fwbench.ruleset.coverage import REFUSED, coverage
    from fwbench.ruleset.importers.load import parse_iface_map
    if args.ruleset is None:
        raise FwbenchError("--coverage lists what the import holds of a rule-set file: "
                           "give one (a template is the model already)")
    cov = coverage(args.ruleset, parse_iface_map(args.iface) if args.iface else None,
                   args.ipsets)
    totals = cov.totals()
    out.print(f"coverage of {cov.path}: {sum(totals.values()):,} rules: "
              f"{totals['imported']:,} imported exactly, {totals['dropped']:,} with parts "
              f"that decide no verdict dropped, {totals['refused']:,} refused",
              highlight=False)
    for e in cov.entries:
        why = f": {e.why}" if e.why else ""
        colour = {"imported": "green", "dropped": "yellow", REFUSED: "red"}[e.status]
        out.print(f"  [{colour}]{e.status:8}[/] {escape(e.where)}{escape(why)}",
                  soft_wrap=True, highlight=False)
    for note in cov.notes:
        out.print(f"  note: {escape(note)}", soft_wrap=True, highlight=False)
    if cov.error:
        out.print(f"[red]not read past: {escape(cov.error)}[/]", soft_wrap=True)
    if args.json:
        jsonout.emit(cov.as_dict(), args.json)
    out.print("the file imports whole" if cov.whole else "[red]the file does not import "
              "whole[/]")
    return 0 if cov.whole else 1


def cmd_backends(args, out: Console) -> int:
    listing = registry.listing()
    if args.json:
        jsonout.emit(listing)
        return 0
    t = Table(title="fwbench backends")
    for col in ("backend", "status", "versions", "what it is", "updates"):
        t.add_column(col)
    for row in listing:
        why = row["reason"]
        versions = "; ".join(f"{v}" for v in row["versions"].values() if v) or "-"
        updates = "\n".join(f"{name}{' (atomic)' if m['atomic'] else ''}: {m['runs']}"
                            for name, m in row["mechanisms"].items()) or "-"
        t.add_row(row["name"], "[green]available[/]" if not why
                  else f"[red]unavailable[/]: {why}", versions, row["description"], updates)
    out.print(t)
    return 0


def cmd_study(args, out: Console, err: Console) -> int:
    from fwbench import studies

    if args.study == "list":
        if args.out:
            raise FwbenchError("study list takes no --out")
        listing = [st.as_dict() for st in studies.STUDIES.values()]
        if args.json:
            jsonout.emit(listing, args.json)
            return 0
        t = Table(title="fwbench studies")
        for col in ("study", "what it runs", "scale against the seed", "time here"):
            t.add_column(col)
        for st in studies.STUDIES.values():
            t.add_row(st.id, f"{st.title}: {st.runs}", st.scale, f"~{st.minutes:g} min")
        out.print(t)
        out.print(f"all five: ~{sum(s.minutes for s in studies.STUDIES.values()):g} min")
        return 0
    if args.json:
        raise FwbenchError("--json goes with `study list`; a study's results are in its "
                           "run directory (findings.csv, report.html)")
    if args.study != "all":
        studies.get(args.study)     # an unknown id is refused before root is asked for
    path = Path(args.out) if args.out else studies.default_out(args.study)
    # So is an --out holding another study's run (or no study's), left as it is.
    studies.validate_out(args.study, path)
    _need_root("fwbench study")
    try:
        if args.study == "all":
            done, page = studies.run_all(path, err)
        else:
            done, page = [studies.run(args.study, path, err)], None
    except (KeyboardInterrupt, _interrupted()):
        print(f"fwbench: interrupted; what ran is kept; finish with: fwbench study "
              f"{args.study} --out {path}", file=sys.stderr)
        return 130
    for o in done:
        verdicts = ", ".join(f"{sum(f.verdict == v for f in o.findings)} {v}"
                             for v in dict.fromkeys(f.verdict for f in o.findings))
        print(f"study {o.study.id}: {o.trials} trials"
              f"{f' ({o.not_ok} not ok)' if o.not_ok else ''} in "
              f"{studies.minutes(o.seconds)}; findings: {verdicts or 'none'}")
        for f in o.findings:
            print(f"  {f.verdict:>13}: {f.claim.text}: {f.ours}")
        print(f"  report: {o.report}")
    if page is not None:
        print(f"all five studies in {studies.minutes(sum(o.seconds for o in done))}: {page}")
    return 0 if all(o.not_ok == 0 and o.report for o in done) else 1


def _interrupted():
    from fwbench.experiments.loop import Interrupted
    return Interrupted


def cmd_clean(args, out: Console) -> int:
    from fwbench.testbed.netns import clean_leftovers

    if args.inventory:
        from fwbench.testbed import hosts, inventory
        inv = inventory.load(args.inventory)
        done = hosts.clean(inv, registry.firewalls())
        for role, what in done.items():   # one line a host, however wide
            out.print(f"{inv.hosts[role].where}: {what}", soft_wrap=True, highlight=False,
                      markup=False)
        return 0 if all(not w.startswith(("still", "left alone")) for w in done.values()) \
            else 1
    _need_root("fwbench clean")
    gone = clean_leftovers()
    out.print(f"removed {len(gone)} namespace(s)" + (": " + ", ".join(gone) if gone else ""))
    return 0


def cmd_lab(args, out: Console) -> int:
    from fwbench.testbed import lab

    _need_root("fwbench lab")
    if args.action == "up":
        path = lab.up(args.dir)
        out.print(f"lab up: {path}")
        out.print(f"run on it with: fwbench run SCENARIO --inventory {path}")
        return 0
    gone = lab.down(args.dir)
    out.print(f"lab down: removed {len(gone)} namespace(s)")
    return 0


def main(argv: list[str] | None = None) -> int:
    out = Console()
    err = Console(stderr=True)
    try:
        args = build_parser().parse_args(argv)
        if args.command == "run":
            return cmd_run(args, out, err)
        if args.command == "report":
            return cmd_report(args, out)
        if args.command == "compare":
            return cmd_compare(args, out)
        if args.command == "check":
            return cmd_check(args, out)
        if args.command == "backends":
            return cmd_backends(args, out)
        if args.command == "study":
            return cmd_study(args, out, err)
        if args.command == "clean":
            return cmd_clean(args, out)
        if args.command == "lab":
            return cmd_lab(args, out)
        raise FwbenchError(f"unknown command {args.command}")
    except FwbenchError as e:
        print(f"fwbench: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("fwbench: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # a bug, not a user error: still one line unless asked
        if os.environ.get("FWBENCH_DEBUG"):
            raise
        print(f"fwbench: internal error: {type(e).__name__}: {e} "
              f"(FWBENCH_DEBUG=1 shows the traceback)", file=sys.stderr)
        return 70
