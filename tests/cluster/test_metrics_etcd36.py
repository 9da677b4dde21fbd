#!/usr/bin/python3
"""etcd's dashboards and alerts on etcdq (issue #36, item 6).

1. Names as etcd 3.6 gives them: a 3-member etcd 3.6.17 and a 3-member
   cluster of the binary under test get the same load (puts through the
   leader and a follower, ranges, a txn, a delete, leases, a watch, compact,
   defrag, hash, hashkv, snapshot, then a follower SIGKILLed); every family
   etcd's survivors expose must be exposed by etcdq's with etcd's type, label
   names and histogram bucket bounds, or be listed in metrics_left_out.txt
   (beside this file) with the reason it means nothing for etcdq. A listed
   name that etcdq does expose fails too (the list is kept true).
2. etcd's own alert rules (the etcd mixin's prometheusAlerts, rendered from
   the pinned module by scripts/etcd_mixin.sh) evaluated by `promtool test
   rules` on series scraped from a real cluster: healthy, nothing fires;
   after two of three members are SIGKILLed, the survivor's
   etcd_server_has_leader, the scrape failures (`up`) and its
   etcd_network_peer_sent_failures_total make etcdNoLeader,
   etcdInsufficientMembers and etcdMembersDown fire. The run is done on etcd
   3.6 too, with the same expectations. Each scrape (about 0.2 s apart) is
   one sample of promtool's 1-minute interval: the rules' windows and `for`
   durations are minutes, the cluster's reactions seconds; what is checked
   is that the rules find, name and count etcdq's series as they do etcd's.
3. A member restarted alone (all three SIGKILLed, one started again, so it
   never sees a leader) shows etcd_server_has_leader 0, is_leader 0 and
   etcd_server_id on --listen-metrics-urls, on etcd 3.6 and on etcdq, and
   etcdq shows every family etcd 3.6 shows there (less the left-out ones and
   APPLIED_ALONE). Before, etcdq registered the member's gauges only once it
   served, so etcdNoLeader could not fire for such a member.

    ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/cluster/test_metrics_etcd36.py
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.request

import grpc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cluster import ClusterTestCase, harness, main, rpc_pb2, rpc_pb2_grpc  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
LEFT_OUT = os.path.join(HERE, "metrics_left_out.txt")
PROMTOOL = shutil.which("promtool")
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
SUFFIXES = ("_bucket", "_sum", "_count")
# Shown by etcd restarted alone because it applies there: its WAL's
# HardState keeps the commit index, so etcd applies its log's committed tail
# at start without a leader. libraft keeps no commit index on disk, so an
# etcdq member restarted alone applies nothing until a leader tells it what
# is committed (the series appear with the first apply).
APPLIED_ALONE = {"etcd_server_apply_duration_seconds"}


def scrape_text(member, timeout=5):
    return urllib.request.urlopen(member.client_url + "/metrics", timeout=timeout).read().decode()


def parse_exposition(text):
    """{family: {"type": t, "labels": set of label names, "le": set of bounds}},
    [(sample name, {label: value}, value)]."""
    fams, samples = {}, []
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, typ = line.split(" ", 3)
            fams[name] = {"type": typ, "labels": set(), "le": set()}
        elif line and not line.startswith("#"):
            m = SAMPLE.match(line)
            assert m, "unparsable line: %r" % line[:200]
            labels = dict(LABEL.findall(m.group(3) or ""))
            name = m.group(1)
            samples.append((name, labels, float(m.group(4))))
            fam = name
            if fam not in fams:
                fam = next((name[:-len(s)] for s in SUFFIXES if name.endswith(s) and name[:-len(s)] in fams), name)
            f = fams.setdefault(fam, {"type": "untyped", "labels": set(), "le": set()})
            f["labels"] |= set(labels) - {"le", "quantile"}
            if "le" in labels:
                f["le"].add(float(labels["le"]))
    return fams, samples


def merge(*expositions):
    out = {}
    for fams in expositions:
        for name, f in fams.items():
            o = out.setdefault(name, {"type": f["type"], "labels": set(), "le": set()})
            o["labels"] |= f["labels"]
            o["le"] |= f["le"]
    return out


def read_left_out():
    """{name: reason} from metrics_left_out.txt ("name<TAB>reason", # comments).
    A name ending in * stands for every family it starts (go_*: Go's runtime
    families change with the Go release etcd is built with)."""
    out = {}
    with open(LEFT_OUT) as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            name, sep, reason = line.partition("\t")
            assert sep and reason.strip(), "%s:%d: no reason for %s" % (LEFT_OUT, n, name)
            out[name.strip()] = reason.strip()
    return out


def load(c):
    """The same work on either cluster: every kind of request etcd counts."""
    li = c.leader_index()
    follower = (li + 1) % 3
    for i in (li, follower):
        kv = c.members[i].kv()
        for k in range(20):
            kv.Put(rpc_pb2.PutRequest(key=b"m/%d/%d" % (i, k), value=b"v" * 100), timeout=10)
        kv.Range(rpc_pb2.RangeRequest(key=b"m/", range_end=b"m0"), timeout=10)
        kv.Range(rpc_pb2.RangeRequest(key=b"m/", range_end=b"m0", serializable=True), timeout=10)
    kv = c.members[li].kv()
    kv.Txn(rpc_pb2.TxnRequest(
        compare=[rpc_pb2.Compare(key=b"m/x", target=rpc_pb2.Compare.VERSION, result=rpc_pb2.Compare.EQUAL,
                                 version=0)],
        success=[rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=b"m/x", value=b"t"))]), timeout=10)
    kv.DeleteRange(rpc_pb2.DeleteRangeRequest(key=b"m/x"), timeout=10)
    lease = c.members[li].lease_stub()
    long = lease.LeaseGrant(rpc_pb2.LeaseGrantRequest(TTL=600), timeout=10)
    next(lease.LeaseKeepAlive(iter([rpc_pb2.LeaseKeepAliveRequest(ID=long.ID)]), timeout=10))
    lease.LeaseRevoke(rpc_pb2.LeaseRevokeRequest(ID=long.ID), timeout=10)
    # A watch that sees events.
    stream = rpc_pb2_grpc.WatchStub(c.members[follower].channel()).Watch(
        iter([rpc_pb2.WatchRequest(create_request=rpc_pb2.WatchCreateRequest(key=b"m/w"))]), timeout=10)
    got = []

    def read():
        try:
            for r in stream:
                got.append(r)
        except grpc.RpcError:
            pass  # cancelled below
    threading.Thread(target=read, daemon=True).start()
    time.sleep(0.3)
    kv.Put(rpc_pb2.PutRequest(key=b"m/w", value=b"1"), timeout=10)
    rev = kv.Put(rpc_pb2.PutRequest(key=b"m/w", value=b"2"), timeout=10).header.revision
    maint = c.members[li].maintenance()
    maint.Hash(rpc_pb2.HashRequest(), timeout=10)
    maint.HashKV(rpc_pb2.HashKVRequest(), timeout=10)
    kv.Compact(rpc_pb2.CompactionRequest(revision=rev - 5, physical=True), timeout=10)
    for _ in maint.Snapshot(rpc_pb2.SnapshotRequest(), timeout=30):
        pass
    maint.Defragment(rpc_pb2.DefragmentRequest(), timeout=30)
    for i in range(3):
        urllib.request.urlopen(c.members[i].client_url + "/health", timeout=10).read()
    deadline = time.monotonic() + 10
    while len(got) < 2 and time.monotonic() < deadline:  # created, then the events
        time.sleep(0.05)
    stream.cancel()
    assert len(got) >= 2, "the watch saw no events"
    return li, follower


@unittest.skipIf(PROMTOOL is None, "promtool (Debian's prometheus package) not installed")
class MetricsAsEtcd36(ClusterTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.rules = subprocess.run(["bash", os.path.join(ROOT, "scripts", "etcd_mixin.sh")], check=True,
                                   stdout=subprocess.PIPE, text=True).stdout.strip()

    def names_after_load(self, binary):
        c = self.new_cluster(3, binary=binary)
        li, follower = load(c)
        other = 3 - li - follower
        c.kill9(other)
        kv = c.members[li].kv()
        for k in range(5):
            kv.Put(rpc_pb2.PutRequest(key=b"m/after/%d" % k, value=b"v"), timeout=10)
        time.sleep(1.5)
        fams = merge(*(parse_exposition(scrape_text(c.members[i]))[0] for i in (li, follower)))
        c.cleanup()
        return fams

    def test_every_etcd_family_is_exposed_as_etcd_or_left_out_with_a_reason(self):
        left_out = read_left_out()
        etcd = self.names_after_load(harness.ORACLE)
        ours = self.names_after_load(harness.binary_under_test())
        self.maxDiff = None

        def listed(n):
            return n in left_out or any(p.endswith("*") and n.startswith(p[:-1]) for p in left_out)
        missing = sorted(n for n in etcd if n not in ours and not listed(n))
        self.assertEqual(missing, [], "etcd 3.6 exposes these; etcdq neither does nor lists them in %s:\n%s" % (
            LEFT_OUT, "\n".join(missing)))
        stale = sorted(n for n in ours if listed(n))
        self.assertEqual(stale, [], "exposed by etcdq yet listed as left out in %s" % LEFT_OUT)
        for name in sorted(set(etcd) & set(ours)):
            with self.subTest(family=name):
                e, o = etcd[name], ours[name]
                self.assertEqual(o["type"], e["type"], name + ": type")
                self.assertEqual(o["labels"], e["labels"], name + ": label names")
                if e["type"] == "histogram":
                    self.assertEqual(o["le"], e["le"], name + ": bucket bounds")
        exposed = sorted(n for n in etcd if n in ours)
        extra = sorted(n for n in ours if n not in etcd and not n.startswith("etcdq_"))
        self.note("etcd 3.6 families: %d; etcdq exposes %d of them, %d left out with a reason; "
                  "etcdq's beyond etcd's (etcdq_* aside): %s" % (
                      len(etcd), len(exposed), len([n for n in etcd if listed(n)]), extra))

    def alert_scrapes(self, binary):
        """[{instance: exposition text, or None where the scrape failed}], one
        a sample: 5 with the cluster healthy, then 26 after m1 and m2 are
        SIGKILLed, about 0.2 s apart."""
        c = self.new_cluster(3, binary=binary)
        kv = c.members[0].kv()
        rounds = []

        def scrape_all():
            row = {}
            for m in c.members:
                try:
                    row[m.name] = scrape_text(m, timeout=2)
                except OSError:
                    row[m.name] = None
            rounds.append(row)
            time.sleep(0.2)
        for k in range(5):
            kv.Put(rpc_pb2.PutRequest(key=b"a/%d" % k, value=b"v"), timeout=10)
            scrape_all()
        c.kill9(1, 2)
        for _ in range(26):
            scrape_all()
        c.cleanup()
        return rounds

    def promtool_test(self, rounds, alert_tests):
        """Runs promtool test rules on the scraped rounds; returns (rc, output)."""
        with open(self.rules) as f:
            rules_text = f.read()
        wanted = set(re.findall(r"\b((?:etcd|grpc)_[a-z_]+)\b", rules_text))
        series = {}  # promtool series selector -> [value per round]
        for k, row in enumerate(rounds):
            for inst, text in row.items():
                key = 'up{instance="%s",job="etcd"}' % inst
                series.setdefault(key, ["_"] * len(rounds))[k] = "0" if text is None else "1"
                if text is None:
                    continue
                for name, labels, v in parse_exposition(text)[1]:
                    if name not in wanted:
                        continue
                    labels = dict(labels, job="etcd", instance=inst)
                    key = "%s{%s}" % (name, ",".join("%s=%s" % (l, json.dumps(labels[l])) for l in sorted(labels)))
                    series.setdefault(key, ["_"] * len(rounds))[k] = repr(v)
        test = {
            "rule_files": [self.rules],
            "evaluation_interval": "1m",
            "tests": [{
                "interval": "1m",
                "input_series": [{"series": k, "values": " ".join(v)} for k, v in sorted(series.items())],
                "alert_rule_test": alert_tests,
            }],
        }
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
            json.dump(test, f)
        try:
            p = subprocess.run([PROMTOOL, "test", "rules", f.name], capture_output=True, text=True, timeout=120)
        finally:
            os.unlink(f.name)
        return p.returncode, p.stdout + p.stderr

    def test_etcds_alert_rules_fire_on_etcdqs_series_as_on_etcds(self):
        last = 30  # the minute of the last round
        quiet = [{"eval_time": "4m", "alertname": a} for a in (
            "etcdNoLeader", "etcdMembersDown", "etcdInsufficientMembers", "etcdHighNumberOfFailedGRPCRequests",
            "etcdHighNumberOfLeaderChanges", "etcdDatabaseQuotaLowSpace")]
        firing = [
            {"eval_time": "%dm" % last, "alertname": "etcdNoLeader", "exp_alerts": [{
                "exp_labels": {"job": "etcd", "instance": "m0", "severity": "critical"},
                "exp_annotations": {"description": 'etcd cluster "etcd": member m0 has no leader.',
                                    "summary": "etcd cluster has no leader."}}]},
            {"eval_time": "%dm" % last, "alertname": "etcdInsufficientMembers", "exp_alerts": [{
                "exp_labels": {"job": "etcd", "severity": "critical"},
                "exp_annotations": {"description": 'etcd cluster "etcd": insufficient members (1).',
                                    "summary": "etcd cluster has insufficient number of members."}}]},
            {"eval_time": "%dm" % last, "alertname": "etcdMembersDown", "exp_alerts": [{
                "exp_labels": {"job": "etcd", "severity": "warning"},
                "exp_annotations": {"description": 'etcd cluster "etcd": members are down (2).',
                                    "summary": "etcd cluster members are down."}}]},
        ]
        for binary in (harness.ORACLE, harness.binary_under_test()):
            with self.subTest(binary=binary):
                rounds = self.alert_scrapes(binary)
                self.assertEqual(len(rounds), last + 1)
                has_leader = [parse_exposition(r["m0"])[1] for r in rounds]
                has_leader = [sum(v for n, _, v in s if n == "etcd_server_has_leader") for s in has_leader]
                self.assertEqual(has_leader[:5], [1] * 5, "m0 had a leader while the cluster was whole")
                self.assertEqual(has_leader[-12:], [0] * 12, "m0 says it has no leader within ~2 s of losing quorum")
                rc, out = self.promtool_test(rounds, quiet + firing)
                self.assertEqual(rc, 0, out)

    def lone_restart_scrape(self, binary):
        """A 3-member cluster all SIGKILLed, m0 restarted alone (it never sees a
        leader) with --listen-metrics-urls: its exposition there, 2 s after its
        first answer (an election timeout and more), and its member id."""
        c = self.new_cluster(3, binary=binary)
        member_id = c.member_id(0)
        c.kill9(0, 1, 2)
        port = harness.free_port()
        m = c.members[0]
        m.extra_args = list(m.extra_args) + ["--listen-metrics-urls", "http://127.0.0.1:%d" % port]
        m.spawn()
        url = "http://127.0.0.1:%d/metrics" % port
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(url, timeout=2).read()
                break
            except OSError:
                self.assertLess(time.monotonic(), deadline, "no /metrics answer restarted alone")
                time.sleep(0.1)
        time.sleep(2)
        text = urllib.request.urlopen(url, timeout=5).read().decode()
        c.cleanup()
        return parse_exposition(text), member_id

    def test_member_restarted_alone_shows_it_has_no_leader(self):
        """etcd's etcdNoLeader alert reads etcd_server_has_leader: a member
        restarted without quorum exposes it (0) as etcd 3.6 does, with
        is_leader 0 and its server_id, and every family etcd 3.6 exposes in
        that state (or one listed as left out)."""
        left_out = read_left_out()
        found = {}
        for binary in (harness.ORACLE, harness.binary_under_test()):
            with self.subTest(binary=binary):
                (fams, samples), member_id = self.lone_restart_scrape(binary)
                found[binary] = fams
                values = {(n, tuple(sorted(l.items()))): v for n, l, v in samples}
                self.assertEqual(values.get(("etcd_server_has_leader", ())), 0.0)
                self.assertEqual(values.get(("etcd_server_is_leader", ())), 0.0)
                self.assertEqual(values.get(("etcd_server_id", (("server_id", "%x" % member_id),))), 1.0)
        etcd, ours = found[harness.ORACLE], found[harness.binary_under_test()]
        self.maxDiff = None

        def listed(n):
            return n in left_out or any(p.endswith("*") and n.startswith(p[:-1]) for p in left_out)
        missing = sorted(n for n in etcd if n not in ours and not listed(n) and n not in APPLIED_ALONE)
        self.assertEqual(missing, [], "etcd 3.6 restarted alone exposes these; etcdq neither does nor lists them")
        self.note("restarted alone: etcd 3.6 families %d, etcdq %d" % (len(etcd), len(ours)))


if __name__ == "__main__":
    main()
