"""/metrics with etcd's names, types and labels (README, "Metrics"): every
series etcd's Grafana dashboard and alert rules query is there with the
type etcd 3.6 gives it (compared with the oracle, run in the same test),
`promtool check metrics` finds nothing etcd's own scrape does not have,
values move when their cause happens (etcd_mvcc_txn_total as etcd 3.6
counts it), and a 1 MiB queue name keeps the scrape small (etcdq-only). Served on the client port, on --listen-client-http-urls and
on --listen-metrics-urls."""
import queue
import re
import shutil
import subprocess
import time
import unittest
import urllib.request

import grpc

import harness
from etcd3.etcdrpc import rpc_pb2, rpc_pb2_grpc

ETCD = harness.ORACLE
PROMTOOL = shutil.which("promtool")

# name -> the type etcd 3.6 exposes it with (its own /metrics).
REQUIRED = {
    "etcd_server_has_leader": "gauge",
    "etcd_server_is_leader": "gauge",
    "etcd_server_leader_changes_seen_total": "counter",
    "etcd_server_proposals_committed_total": "gauge",
    "etcd_server_proposals_applied_total": "gauge",
    "etcd_server_proposals_pending": "gauge",
    "etcd_server_proposals_failed_total": "counter",
    "etcd_mvcc_db_total_size_in_bytes": "gauge",
    "etcd_mvcc_db_total_size_in_use_in_bytes": "gauge",
    "etcd_server_quota_backend_bytes": "gauge",
    "etcd_disk_wal_fsync_duration_seconds": "histogram",
    "etcd_disk_backend_commit_duration_seconds": "histogram",
    "etcd_network_client_grpc_received_bytes_total": "counter",
    "etcd_network_client_grpc_sent_bytes_total": "counter",
    "grpc_server_started_total": "counter",
    "grpc_server_handled_total": "counter",
    "grpc_server_msg_received_total": "counter",
    "grpc_server_msg_sent_total": "counter",
    "etcd_debugging_mvcc_keys_total": "gauge",
    "etcd_mvcc_put_total": "counter",
    "etcd_mvcc_delete_total": "counter",
    "etcd_mvcc_txn_total": "counter",
    "etcd_mvcc_range_total": "counter",
    "etcd_debugging_mvcc_watcher_total": "gauge",
    "etcd_debugging_mvcc_watch_stream_total": "gauge",
    "etcd_debugging_mvcc_slow_watcher_total": "gauge",
    "etcd_debugging_lease_granted_total": "counter",
    "etcd_debugging_lease_revoked_total": "counter",
    "etcd_debugging_lease_renewed_total": "counter",
    "etcd_server_id": "gauge",
    "etcd_server_version": "gauge",
    "etcd_cluster_version": "gauge",
    "etcd_server_health_success": "counter",
    "etcd_server_health_failures": "counter",
    "process_cpu_seconds_total": "counter",
    "process_resident_memory_bytes": "gauge",
    "process_open_fds": "gauge",
    "process_max_fds": "gauge",
    "process_start_time_seconds": "gauge",
    "process_virtual_memory_bytes": "gauge",
}

LABELS = {
    "grpc_server_handled_total": {"grpc_type", "grpc_service", "grpc_method", "grpc_code"},
    "grpc_server_started_total": {"grpc_type", "grpc_service", "grpc_method"},
    "grpc_server_msg_received_total": {"grpc_type", "grpc_service", "grpc_method"},
    "grpc_server_msg_sent_total": {"grpc_type", "grpc_service", "grpc_method"},
    "etcd_server_id": {"server_id"},
    "etcd_server_version": {"server_version"},
    "etcd_cluster_version": {"cluster_version"},
}

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def get(url):
    return urllib.request.urlopen(url, timeout=30).read().decode()


def parse(text):
    """(types: name -> type, samples: [(name, {label: value}, float)])."""
    types, samples = {}, []
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, typ = line.split(" ", 3)
            types[name] = typ
        elif line and not line.startswith("#"):
            m = SAMPLE.match(line)
            assert m, "unparsable line: %r" % line[:200]
            labels = dict(LABEL.findall(m.group(3) or ""))
            samples.append((m.group(1), labels, float(m.group(4))))
    return types, samples


def value(samples, name, **labels):
    """The sum of the samples of `name` whose labels include `labels`."""
    return sum(v for n, l, v in samples if n == name and all(l.get(k) == x for k, x in labels.items()))


def lint_names(text):
    """promtool's exit code and the metric names it lints."""
    p = subprocess.run([PROMTOOL, "check", "metrics"], input=text.encode(), capture_output=True, timeout=60)
    out = (p.stdout + p.stderr).decode()
    return p.returncode, out, {line.split(" ", 1)[0] for line in out.splitlines() if line.strip()}


class Metrics(harness.MemberTestCase):
    @classmethod
    def setUpClass(cls):
        cls.http_port = harness.free_port()
        cls.metrics_port = harness.free_port()
        cls.m = cls.new_class_member(["--listen-metrics-urls", "http://127.0.0.1:%d" % cls.metrics_port])
        cls.oracle = cls.new_class_member(binary=ETCD, name="oracle")
        cls.oracle_text = get(cls.oracle.client_url + "/metrics")
        cls.oracle_types, cls.oracle_samples = parse(cls.oracle_text)

    def scrape(self):
        return parse(get(self.m.client_url + "/metrics"))

    def test_every_series_has_etcds_type_and_labels(self):
        types, samples = self.scrape()
        for name, typ in REQUIRED.items():
            self.assertEqual(types.get(name), typ, name)
            self.assertEqual(self.oracle_types.get(name), typ, "etcd gives %s another type" % name)
            if typ != "histogram":
                self.assertTrue(any(n == name for n, _, _ in samples), "no sample of " + name)
        # Every family both expose has etcd's type.
        for name in set(types) & set(self.oracle_types):
            self.assertEqual(types[name], self.oracle_types[name], name)
        for name, want in LABELS.items():
            for n, labels, _ in samples:
                if n == name:
                    self.assertEqual(set(labels), want, name)
        for hist in ("etcd_disk_wal_fsync_duration_seconds", "etcd_disk_backend_commit_duration_seconds"):
            ours = sorted(l["le"] for n, l, _ in samples if n == hist + "_bucket")
            theirs = sorted(l["le"] for n, l, _ in self.oracle_samples if n == hist + "_bucket")
            self.assertEqual(ours, theirs, hist + " buckets")
        self.assertEqual(value(samples, "etcd_server_has_leader"), 1)
        self.assertEqual(value(samples, "etcd_server_is_leader"), 1)
        self.assertGreaterEqual(value(samples, "etcd_server_leader_changes_seen_total"), 1)
        ids = [l["server_id"] for n, l, _ in samples if n == "etcd_server_id"]
        st = self.m.maintenance().Status(rpc_pb2.StatusRequest(), timeout=10)
        self.assertEqual(ids, ["%x" % st.header.member_id])
        self.assertEqual([l["server_version"] for n, l, _ in samples if n == "etcd_server_version"], [st.version])

    def test_grpc_methods_preinitialized_as_etcd(self):
        """go-grpc-prometheus shows every method of every service at 0 with
        each of the 17 codes: the methods both serve have the same labels."""
        _, samples = self.scrape()

        def methods(ss):
            return {(l["grpc_type"], l["grpc_service"], l["grpc_method"]) for n, l, _ in ss
                    if n == "grpc_server_started_total"}
        ours, theirs = methods(samples), methods(self.oracle_samples)
        shared = {(s, m) for _, s, m in ours} & {(s, m) for _, s, m in theirs}
        self.assertGreaterEqual(len(shared), 20)
        self.assertEqual({x for x in ours if (x[1], x[2]) in shared}, {x for x in theirs if (x[1], x[2]) in shared})
        codes = {l["grpc_code"] for n, l, _ in samples if n == "grpc_server_handled_total"}
        self.assertEqual(codes, {l["grpc_code"] for n, l, _ in self.oracle_samples if n == "grpc_server_handled_total"})
        self.assertEqual(len(codes), 17)

    @unittest.skipIf(PROMTOOL is None, "promtool (Debian's prometheus package) not installed")
    def test_promtool_finds_nothing_etcd_does_not_have(self):
        text = get(self.m.client_url + "/metrics")
        rc, out, names = lint_names(text)
        self.assertIn(rc, (0, 3), out)  # 1 is a parse error; 3 is lint only
        orc, oout, onames = lint_names(self.oracle_text)
        self.assertIn(orc, (0, 3), oout)
        # Lints only where etcd's own names draw them (etcd_server_health_success
        # has no _total; gauges such as etcd_debugging_mvcc_keys_total do) and
        # etcdq's own queue families.
        self.assertEqual({n for n in names if not n.startswith("etcdq_")} - onames, set(), out)

    def test_values_move_with_their_cause(self):
        kv = self.m.kv()
        _, before = self.scrape()
        kv.Put(rpc_pb2.PutRequest(key=b"metrics-k", value=b"v"), timeout=10)
        kv.Range(rpc_pb2.RangeRequest(key=b"metrics-k"), timeout=10)
        kv.Txn(rpc_pb2.TxnRequest(
            compare=[rpc_pb2.Compare(key=b"metrics-k", target=rpc_pb2.Compare.VERSION,
                                     result=rpc_pb2.Compare.GREATER, version=0)],
            success=[rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=b"metrics-t", value=b"v"))]),
            timeout=10)
        kv.DeleteRange(rpc_pb2.DeleteRangeRequest(key=b"metrics-t"), timeout=10)
        with self.assertRaises(grpc.RpcError) as e:
            kv.Put(rpc_pb2.PutRequest(key=b"", value=b"v"), timeout=10)
        self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        lease = self.m.lease_stub().LeaseGrant(rpc_pb2.LeaseGrantRequest(TTL=60), timeout=10)
        self.m.lease_stub().LeaseRevoke(rpc_pb2.LeaseRevokeRequest(ID=lease.ID), timeout=10)
        get(self.m.client_url + "/health")
        time.sleep(0.1)  # the pending gauge and progress refresh every consensus tick
        _, after = self.scrape()

        def delta(name, **labels):
            return value(after, name, **labels) - value(before, name, **labels)

        # put, txn (its put), delete, grant, revoke: five entries at least.
        self.assertGreaterEqual(delta("etcd_server_proposals_committed_total"), 5)
        self.assertGreaterEqual(delta("etcd_server_proposals_applied_total"), 5)
        self.assertGreaterEqual(delta("etcd_disk_wal_fsync_duration_seconds_count"), 1)
        self.assertGreaterEqual(delta("etcd_disk_wal_fsync_duration_seconds_sum"), 0)
        self.assertGreaterEqual(delta("etcd_disk_backend_commit_duration_seconds_count"), 1)
        self.assertEqual(delta("etcd_mvcc_put_total"), 2)
        self.assertEqual(delta("etcd_mvcc_delete_total"), 1)
        # etcd 3.6: the compare is one mvcc txn, the put another; neither has two operations.
        self.assertEqual(delta("etcd_mvcc_txn_total"), 0)
        self.assertGreaterEqual(delta("etcd_mvcc_range_total"), 2)  # the Range and the txn's compare
        self.assertEqual(delta("etcd_debugging_mvcc_keys_total"), 1)  # metrics-k stays
        self.assertEqual(delta("etcd_debugging_lease_granted_total"), 1)
        self.assertEqual(delta("etcd_debugging_lease_revoked_total"), 1)
        self.assertEqual(delta("etcd_server_health_success"), 1)
        kv_put = dict(grpc_type="unary", grpc_service="etcdserverpb.KV", grpc_method="Put")
        self.assertEqual(delta("grpc_server_started_total", **kv_put), 2)
        self.assertEqual(delta("grpc_server_handled_total", grpc_code="OK", **kv_put), 1)
        self.assertEqual(delta("grpc_server_handled_total", grpc_code="InvalidArgument", **kv_put), 1)
        self.assertEqual(delta("grpc_server_msg_received_total", **kv_put), 2)
        # etcd 3.6 (go-grpc-middleware v2's prometheus provider) counts the
        # answer of a failed unary call as sent too; 3.4 counted only successes.
        self.assertEqual(delta("grpc_server_msg_sent_total", **kv_put), 2)
        self.assertEqual(delta("grpc_server_handled_total", grpc_code="OK", grpc_method="Txn"), 1)
        # The bytes of the messages themselves: a PutRequest of "metrics-k"="v" is 14.
        self.assertGreaterEqual(delta("etcd_network_client_grpc_received_bytes_total"), 14)
        self.assertGreater(delta("etcd_network_client_grpc_sent_bytes_total"), 0)
        self.assertGreater(value(after, "process_resident_memory_bytes"), 1 << 20)
        self.assertGreater(value(after, "process_open_fds"), 3)
        self.assertAlmostEqual(value(after, "process_start_time_seconds"), time.time(), delta=3600)

    def test_36_series_move_with_their_cause(self):
        """Families etcd 3.6 added to 3.4's (issue #36): revisions, put
        sizes, WAL bytes, apply and range durations by op, client requests,
        watch events, defrag/hash/snapshot durations, scrapes, fds."""
        kv = self.m.kv()
        maint = self.m.maintenance()
        _, before = self.scrape()
        ch = self.m.channel()
        reqs = queue.Queue()
        reqs.put(rpc_pb2.WatchRequest(create_request=rpc_pb2.WatchCreateRequest(key=b"metrics36-w")))
        stream = rpc_pb2_grpc.WatchStub(ch).Watch(iter(reqs.get, None))
        next(stream)  # created
        put = kv.Put(rpc_pb2.PutRequest(key=b"metrics36-w", value=b"0123456789"), timeout=10)
        self.assertEqual(len(next(stream).events), 1)
        kv.Range(rpc_pb2.RangeRequest(key=b"metrics36-w"), timeout=10)
        maint.Defragment(rpc_pb2.DefragmentRequest(), timeout=60)
        maint.HashKV(rpc_pb2.HashKVRequest(), timeout=10)
        for _ in maint.Snapshot(rpc_pb2.SnapshotRequest(), timeout=60):
            pass
        reqs.put(None)
        stream.cancel()
        _, after = self.scrape()

        def delta(name, **labels):
            return value(after, name, **labels) - value(before, name, **labels)
        self.assertGreaterEqual(value(after, "etcd_debugging_mvcc_current_revision"), put.header.revision)
        # Nothing in this class compacts: etcd's compactMainRev before the first is -1.
        self.assertEqual(value(after, "etcd_debugging_mvcc_compact_revision"), -1)
        # etcd counts the key's and the value's lengths: 11 + 10.
        self.assertEqual(delta("etcd_debugging_mvcc_total_put_size_in_bytes"), 21)
        self.assertGreater(delta("etcd_disk_wal_write_bytes_total"), 21)
        self.assertGreaterEqual(delta("etcd_server_apply_duration_seconds_count", op="Put", success="true",
                                      version="v3"), 1)
        self.assertGreaterEqual(delta("etcd_server_range_duration_seconds_count", success="true"), 1)
        self.assertGreaterEqual(delta("etcd_server_client_requests_total", type="unary"), 4)  # Put, Range, Defragment, HashKV
        self.assertGreaterEqual(delta("etcd_server_client_requests_total", type="stream"), 2)  # Watch, Snapshot
        self.assertGreaterEqual(delta("etcd_debugging_mvcc_events_total"), 1)
        self.assertEqual(delta("etcd_disk_backend_defrag_duration_seconds_count"), 1)
        self.assertEqual(value(after, "etcd_disk_defrag_inflight"), 0)
        self.assertEqual(delta("etcd_mvcc_hash_rev_duration_seconds_count"), 1)
        self.assertEqual(delta("etcd_disk_backend_snapshot_duration_seconds_count"), 1)
        # This scrape is served while counted in flight; the one before is done.
        self.assertEqual(value(after, "promhttp_metric_handler_requests_in_flight"), 1)
        self.assertEqual(delta("promhttp_metric_handler_requests_total", code="200"), 1)
        self.assertGreater(value(after, "os_fd_used"), 3)
        self.assertEqual(value(after, "os_fd_limit"), value(after, "process_max_fds"))
        self.assertGreater(value(after, "process_network_receive_bytes_total"), 0)

    def test_watchers_counted_while_open(self):
        ch = self.m.channel()
        stub = rpc_pb2_grpc.WatchStub(ch)
        reqs = queue.Queue()
        reqs.put(rpc_pb2.WatchRequest(create_request=rpc_pb2.WatchCreateRequest(key=b"metrics-w")))
        stream = stub.Watch(iter(reqs.get, None))
        next(stream)  # created
        _, samples = self.scrape()
        self.assertGreaterEqual(value(samples, "etcd_debugging_mvcc_watcher_total"), 1)
        self.assertGreaterEqual(value(samples, "etcd_debugging_mvcc_watch_stream_total"), 1)
        self.assertEqual(value(samples, "grpc_server_started_total", grpc_method="Watch",
                               grpc_type="bidi_stream"), value(samples, "grpc_server_started_total",
                                                               grpc_method="Watch"))
        reqs.put(None)
        stream.cancel()

    def test_every_http_listener_serves_metrics(self):
        for url in (self.m.client_url, "http://127.0.0.1:%d" % self.metrics_port):
            self.assertIn("# TYPE etcd_server_has_leader gauge", get(url + "/metrics"))
            self.assertIn('"health":"true"', get(url + "/health"))

    def test_txn_total_counts_mvcc_txns_as_etcd_36(self):
        """etcd 3.6 evaluates a writing Txn's compares in one mvcc txn and runs
        its ops in another, each counted when it has more than one range, put
        or delete; a read-only Txn is one. (etcd 3.4 counted a Txn once,
        compares and top-level ops together.) Measured on etcd 3.6.17."""
        kv = self.m.kv()
        cmp = rpc_pb2.Compare(key=b"metrics-c", target=rpc_pb2.Compare.VERSION,
                              result=rpc_pb2.Compare.GREATER, version=-1)
        put = rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=b"metrics-c", value=b"v"))
        put2 = rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=b"metrics-d", value=b"v"))
        rng = rpc_pb2.RequestOp(request_range=rpc_pb2.RangeRequest(key=b"metrics-c"))

        def nested(*ops, compare=()):
            return rpc_pb2.RequestOp(request_txn=rpc_pb2.TxnRequest(compare=list(compare), success=list(ops)))
        cases = [  # (compares, success ops, etcd_mvcc_txn_total's delta)
            ([cmp], [put], 0), ([cmp, cmp], [put], 1), ([cmp], [put, put2], 1), ([], [put, put2], 1),
            ([], [put], 0), ([cmp], [rng], 1), ([], [rng, rng], 1), ([], [rng], 0), ([cmp], [put, rng], 1),
            ([], [nested(put, compare=[cmp])], 0), ([cmp], [nested(put, compare=[cmp])], 1),
            ([], [nested(put, put2)], 1), ([], [nested(rng, rng)], 1), ([], [], 0), ([cmp], [], 0),
            ([cmp, cmp], [], 1),
        ]
        for compare, success, want in cases:
            with self.subTest(compare=len(compare), success=[str(op).split(" ")[0] for op in success]):
                before = value(self.scrape()[1], "etcd_mvcc_txn_total")
                kv.Txn(rpc_pb2.TxnRequest(compare=compare, success=success), timeout=10)
                self.assertEqual(value(self.scrape()[1], "etcd_mvcc_txn_total") - before, want)

    @unittest.skipIf(harness.is_reference_etcd(), "etcd has no queues")
    def test_a_1mib_queue_name_keeps_the_scrape_small(self):
        """Label values are bounded (common/metrics.h): a 1 MiB queue name
        shows as its first 64 bytes, "...#" and a 64-bit hash; two long
        names that differ only at the end stay two series."""
        kv = self.m.kv()
        _, before = self.scrape()
        size_before = len(get(self.m.client_url + "/metrics"))
        long_a = "a" * (1 << 20)
        long_b = "a" * ((1 << 20) - 1) + "b"
        for name in (long_a, long_b):
            kv.Put(rpc_pb2.PutRequest(key=("/q/%s/p/m" % name).encode(), value=b"v"), timeout=30)
        text = get(self.m.client_url + "/metrics")
        _, samples = parse(text)
        labels = sorted({l["queue"] for n, l, _ in samples if n == "etcdq_queue_depth" and len(l["queue"]) > 60})
        self.assertEqual(len(labels), 2, labels)
        for lab in labels:
            self.assertRegex(lab, r"^a{64}\.\.\.#[0-9a-f]{16}$")
            self.assertLessEqual(len(lab), 128)
        # Eight families, one line each per queue, ~100 bytes more a line.
        self.assertLess(len(text) - size_before, 8 * 2 * 200, "scrape grew by %d bytes" % (len(text) - size_before))
        self.assertEqual(value(samples, "etcdq_queue_depth", queue=labels[0]), 1)


if __name__ == "__main__":
    harness.main()
