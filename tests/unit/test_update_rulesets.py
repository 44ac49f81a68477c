"""The update experiment's rule-set pairs and the commands made from their
differences: what each kind changes, that the probe's change comes last, and that
the commands, applied as the tools apply them, turn the old rule set into the new."""
import random

import pytest

from fwbench.errors import FwbenchError
from fwbench.ruleset.evaluate import Evaluator
from fwbench.ruleset.model import Interfaces, RuleSetError
from fwbench.ruleset.render import ipset as ipset_render
from fwbench.ruleset.render import iptables as ipt_render
from fwbench.ruleset.render import nft as nft_render
from fwbench.ruleset.templates import updates as tpl
from fwbench.backends import delta

IFS = Interfaces("c0", "s0", ("198.18.0.1", "198.19.0.1"))
CASES = [(k.name, layout) for k in tpl.KINDS.values() for layout in ("linear", "set")
         if tpl.fits(k, layout)]


def flows(rs):
    ev = Evaluator(rs)
    by_name = {p.name: p for p in rs.probes}
    return (ev.evaluate(by_name["kept flow"].packet).forward,
            ev.evaluate(by_name["probe flow"].packet).forward)


@pytest.mark.parametrize("kind,layout", CASES)
def test_every_kind_changes_the_probe_flow_only(kind, layout):
    old, new = tpl.pair(kind, 200, layout=layout)
    starts = tpl.KINDS[kind].probe == "starts"
    assert flows(old) == (True, not starts)
    assert flows(new) == (True, starts)
    assert old.size == 200
    # The probes say the same as the evaluator: what verification checks.
    for rs in (old, new):
        assert {p.name: p.forward for p in rs.probes}["probe flow"] == flows(rs)[1]


@pytest.mark.parametrize("kind,want", [
    ("add-end", 201), ("add-front", 201), ("delete", 199), ("replace", 200),
    ("add-1pct", 202), ("add-10pct", 220), ("delete-1pct", 198), ("delete-10pct", 180),
    ("replace-all", 200)])
def test_sizes_after_each_linear_kind(kind, want):
    old, new = tpl.pair(kind, 200, layout="linear")
    assert (old.size, new.size) == (200, want)
    assert tpl.KINDS[kind].changed(200) == {"replace-all": 200}.get(
        kind, abs(want - 200) or 1)


def test_unchanged_entries_keep_their_ids_and_matches():
    old, new = tpl.pair("delete-10pct", 100, layout="linear")
    before = {r.id: r for _, _, r in old.rules()}
    after = {r.id: r for _, _, r in new.rules()}
    assert set(after) < set(before)
    assert all(before[i] == after[i] for i in after)
    assert len(set(before) - set(after)) == 10 and "probe" in before


def test_sets_keep_one_capacity_before_and_after():
    old, new = tpl.pair("element-add", 70_000, layout="set")
    (s_old,), (s_new,) = old.tables[0].sets, new.tables[0].sets
    assert s_old.size == s_new.size >= 70_001


@pytest.mark.parametrize("args,msg", [
    (("nope", 10, "linear"), "unknown update kind"),
    (("element-add", 10, "linear"), "has none to change"),
    (("add-end", 10, "set"), "has none to change"),
    (("add-end", 1, "linear"), "at least 2"),
])
def test_refusals_are_one_line(args, msg):
    with pytest.raises(RuleSetError, match=msg):
        tpl.pair(args[0], args[1], layout=args[2])


# --- the changes as commands --------------------------------------------------------

def apply_changes(rules: list[str], changes) -> list[str]:
    """The rule changes as iptables and nft apply them, positions as they stand."""
    out = list(rules)
    for c in changes:
        if c.op == "append":
            out.append(c.rule)
        elif c.op == "insert":
            assert 1 <= c.position <= len(out)
            out.insert(c.position - 1, c.rule)
        elif c.op == "replace":
            assert out[c.position - 1] == c.old
            out[c.position - 1] = c.rule
        else:
            assert out[c.position - 1] == c.rule
            del out[c.position - 1]
    return out


def test_sequence_changes_turn_any_list_into_any_other():
    rng = random.Random(7)
    for _ in range(300):
        pool = [f"r{i}" for i in range(12)]
        old = rng.sample(pool, rng.randint(0, 8))
        new = rng.sample(pool, rng.randint(0, 8))
        assert apply_changes(old, delta.sequence_changes("t", "c", old, new)) == new


def ipt(rs):
    return ipt_render.render(rs, IFS, 4)


@pytest.mark.parametrize("kind,lines", [
    ("add-end", ["-A fwb_from_client "]),
    ("add-front", ["-I fwb_from_client 1 "]),
    ("delete", ["-D fwb_from_client "]),
    ("replace", ["-R fwb_from_client 52 "]),
])
def test_iptables_single_rule_commands(kind, lines):
    old, new = tpl.pair(kind, 50, layout="linear")
    changes = delta.iptables_changes(ipt(old), ipt(new))
    got = [delta.iptables_line(c) for c in changes]
    assert len(got) == len(lines)
    assert got[0].startswith(lines[0]) and got[0].endswith('--comment "fwb:probe" -j ACCEPT')
    text = delta.iptables_restore_text(changes)
    assert text.startswith("*filter\n") and text.endswith("COMMIT\n")
    argv = delta.iptables_argv("iptables-legacy", changes[0])
    assert argv[:3] == ["iptables-legacy", "-t", "filter"] and "fwb:probe" in argv


@pytest.mark.parametrize("kind", ["add-10pct", "delete-10pct", "replace", "add-front"])
def test_iptables_changes_reach_the_new_chain_probe_last(kind):
    old, new = tpl.pair(kind, 100, layout="linear")
    changes = delta.iptables_changes(ipt(old), ipt(new))
    _, old_rules = delta._ipt_parts(ipt(old))
    _, new_rules = delta._ipt_parts(ipt(new))
    key = ("filter", "fwb_from_client")
    assert apply_changes(old_rules[key], changes) == new_rules[key]
    assert "fwb:probe" in changes[-1].rule


def test_iptables_refuses_a_changed_policy():
    old, _ = tpl.pair("add-end", 10, layout="linear")
    text = ipt(old)
    with pytest.raises(FwbenchError, match="only a reload"):
        delta.iptables_changes(text, text.replace(":FORWARD DROP", ":FORWARD ACCEPT"))


def test_ipset_element_changes_probe_last():
    old, new = tpl.pair("elements-delete-10pct", 100, layout="set")
    changes = delta.ipset_changes(ipset_render.render(old), ipset_render.render(new))
    assert len(changes) == 10 and all(c.op == "delete" for c in changes)
    assert delta.ipset_line(changes[-1]) == "del fwb_allowed 198.19.0.2,udp:5202"
    old, new = tpl.pair("element-add", 100, layout="set")
    (c,) = delta.ipset_changes(ipset_render.render(old), ipset_render.render(new))
    assert delta.ipset_line(c) == "add fwb_allowed 198.19.0.2,udp:5202"


def test_ipset_swap_builds_a_new_set_and_swaps_it_in():
    _, new = tpl.pair("replace-all", 10, layout="set")
    text = delta.ipset_swap_text(ipset_render.render(new)).splitlines()
    assert text[0].startswith("create fwb_allowed_n hash:ip,port family inet")
    assert sum(ln.startswith("add fwb_allowed_n ") for ln in text) == 10
    assert text[-2:] == ["swap fwb_allowed_n fwb_allowed", "destroy fwb_allowed_n"]


def nft(rs):
    return nft_render.render(rs, IFS)


PROBE_NFT = 'ip daddr 198.19.0.2 udp dport 5202 counter accept comment "fwb:probe"'


@pytest.mark.parametrize("kind,want", [
    ("add-end", f"add rule ip fwbench from_client {PROBE_NFT}"),
    ("add-front", f"insert rule ip fwbench from_client {PROBE_NFT}"),
    ("delete", "delete rule ip fwbench from_client handle 7"),
    ("replace", f"replace rule ip fwbench from_client handle 9 {PROBE_NFT}"),
])
def test_nft_single_rule_commands(kind, want):
    old, new = tpl.pair(kind, 20, layout="linear")
    rules, elements = delta.nft_changes(nft(old), nft(new))
    assert not elements and len(rules) == 1
    assert delta.nft_rule_command(rules[0], {"probe": 7, "fill-20": 9}) == want


def test_nft_insert_in_the_middle_uses_an_index():
    c = delta.RuleChange("insert", "ip fwbench", "from_client", 4, "accept")
    assert delta.nft_rule_command(c, {}) == "add rule ip fwbench from_client index 2 accept"


def test_nft_changes_reach_the_new_chain():
    old, new = tpl.pair("delete-10pct", 100, layout="linear")
    rules, _ = delta.nft_changes(nft(old), nft(new))
    o, n = delta.nft_parts(nft(old)), delta.nft_parts(nft(new))
    key = ("ip fwbench", "from_client")
    assert apply_changes(o.rules[key], rules) == n.rules[key]
    text = delta.nft_transaction(rules, [], {f"fill-{100 + i}": i for i in range(9)}
                                 | {"probe": 99})
    assert text.count("delete rule") == 10 and text.splitlines()[-1].endswith("handle 99")


def test_nft_a_rule_with_no_handle_is_an_error():
    old, new = tpl.pair("delete", 20, layout="linear")
    rules, _ = delta.nft_changes(nft(old), nft(new))
    with pytest.raises(FwbenchError, match="no rule with id 'probe'"):
        delta.nft_rule_command(rules[0], {})


def test_nft_element_commands():
    old, new = tpl.pair("elements-add-10pct", 100, layout="set")
    rules, elements = delta.nft_changes(nft(old), nft(new))
    assert not rules and len(elements) == 10
    assert elements[-1].element == "198.19.0.2 . udp . 5202"
    one = delta.nft_element_command([elements[-1]])
    assert one == "add element ip fwbench allowed { 198.19.0.2 . udp . 5202 }"
    text = delta.nft_transaction([], elements, {})
    assert text.count("add element") == 1 and text.count(" . tcp . ") == 9


def test_bpf_map_changes_give_new_elements_the_room_slots():
    from fwbench.backends.ebpf import map_changes
    from fwbench.ruleset.render import bpf as bpf_render
    old, new = tpl.pair("elements-add-10pct", 100, layout="set")
    before, after = (bpf_render.render(rs, True).text for rs in (old, new))
    lines = map_changes(before, after).splitlines()
    n = len(before.splitlines())
    assert len(lines) == 10 and lines[-1] == f"add 198.19.0.2 17 5202 {n + 10}"
    assert lines[0].endswith(f" {n + 1}") and lines[0].startswith("add 198.19.0.2 6 ")
    assert map_changes(after, before).splitlines()[-1] == "del 198.19.0.2 17 5202"
    lin_old, lin_new = tpl.pair("add-end", 10, layout="linear")
    with pytest.raises(FwbenchError, match="only a reload"):
        map_changes(bpf_render.render(lin_old, False).text,
                    bpf_render.render(lin_new, False).text)


def test_an_ipv6_update_run_is_refused_in_one_line():
    from fwbench.scenario import from_dict
    from fwbench.experiments.update.experiment import Update
    with pytest.raises(FwbenchError, match="IPv4 only"):
        Update(from_dict({"method": "update", "family": "ipv6", "frame_sizes": [84]})).preflight()


def test_commands_cells_that_would_run_for_hours_are_left_out_with_the_reason():
    from types import SimpleNamespace
    from fwbench.experiments.update import UpdateSettings
    from fwbench.experiments.update.experiment import cells_of
    b = SimpleNamespace(name="iptables-legacy", layout="linear",
                        mechanisms={"batch": (1, True), "commands": (2, False)})
    s = UpdateSettings(kinds=["add-end", "add-1pct"], mechanisms=["batch", "commands"])
    cells, left = cells_of(b, s, [10_000, 100_000])
    assert ("iptables-legacy", 100_000, "add-1pct", "batch") in cells
    assert ("iptables-legacy", 10_000, "add-1pct", "commands") in cells
    assert ("iptables-legacy", 100_000, "add-end", "commands") in cells
    assert ("iptables-legacy", 100_000, "add-1pct", "commands") not in cells
    assert left == ["iptables-legacy add-1pct by commands at 100,000 rules: 1,000 commands, "
                    "each one process that reads the whole rule set (changes x rules "
                    "100,000,000 > commands_max_work 10,000,000); batch makes the same "
                    "changes in one"]
    s = UpdateSettings(kinds=["add-1pct"], mechanisms=["commands"],
                       commands_max_work=10 ** 8)
    assert len(cells_of(b, s, [10_000, 100_000])[0]) == 2
    sets = SimpleNamespace(name="ipset", layout="set", mechanisms={"commands": (2, False)})
    s = UpdateSettings(kinds=["elements-add-10pct"], mechanisms=["commands"])
    assert len(cells_of(sets, s, [100_000, 1_000_000])[0]) == 2


def test_reload_kinds_replace_all_keeps_a_reload_where_it_is_the_only_way():
    from types import SimpleNamespace
    from fwbench.experiments.update import UpdateSettings
    from fwbench.experiments.update.experiment import cells_of
    s = UpdateSettings(kinds=["add-end", "replace-all"], mechanisms=["reload", "batch"],
                       reload_kinds="replace-all")
    linear_bpf = SimpleNamespace(name="xdp-linear", layout="linear",
                                 mechanisms={"reload": ("", True)})
    ipt = SimpleNamespace(name="iptables-nft", layout="linear",
                          mechanisms={"reload": ("", True), "batch": ("", True)})
    assert [c[2:] for c in cells_of(linear_bpf, s, [10_000])[0]] == \
        [("add-end", "reload"), ("replace-all", "reload")]
    assert [c[2:] for c in cells_of(ipt, s, [10_000])[0]] == \
        [("add-end", "batch"), ("replace-all", "reload")]


def test_the_latest_few_rule_sets_are_remembered_and_the_oldest_dropped():
    from collections import OrderedDict
    from fwbench.backends.base import remember, remembered
    cache, made = OrderedDict(), []

    def make(k):
        made.append(k)
        return k * 10
    for k in (1, 2, 1, 3, 4, 1, 2):
        assert remembered(cache, k, lambda: make(k), kept=3) == k * 10
    # 1 was used again before 3 and 4 came, so it stayed; 2 was dropped for 4.
    assert made == [1, 2, 3, 4, 2] and list(cache) == [4, 1, 2]
    remember(cache, 5, 50, kept=3)
    assert list(cache) == [1, 2, 5]
