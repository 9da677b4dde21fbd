"""A mixed write load whose every acknowledged write is recorded, and the checks that a
store kept them after SIGKILL (tests/integration/test_durability.py on one member,
tests/cluster/test_cluster_sigkill.py on three).

Each worker thread owns its keys (`<prefix>w<n>/`), its leases and its queue
(`/q/crash-<prefix>w<n>/`), so its acknowledged writes alone decide what they must
hold: puts, deletes, txns (a compare on a key's version, then puts and a delete),
leases granted and revoked with keys attached, queue produces and acks. A write that
failed (the member died under it) is in doubt: the keys it touched may hold either
outcome, and the worker stops. Acknowledged compactions are recorded too.

check(): every key holds its last acknowledged write with its mod_revision,
create_revision and version (or the in-doubt write's outcome); every acknowledged
mutation's revision is unique; the history from the compaction on (a watch from it)
has every revision from there to the current one, each write's events at the
revision it was acknowledged with; a Range below the last acknowledged compaction
is refused as compacted; every acknowledged lease is there with its keys, every
revoked one is gone; a queue holds exactly its produced and unacked messages, at
the revisions of their produces, in produce order.
"""
import os
import random
import threading

import grpc
from etcd3.etcdrpc import rpc_pb2 as pb
from etcd3.etcdrpc import rpc_pb2_grpc

import harness

LEASE_TTL_S = 3600
# Values are up to this many bytes (random). A by-hand run with large values fills
# memtables, so that kills land in RocksDB's flushes and compactions too.
VALUE_BYTES = int(os.environ.get("CRASH_VALUE_BYTES", "200"))
RPC_TIMEOUT_S = 5.0
COMPACTED = "etcdserver: mvcc: required revision has been compacted"


def _end(prefix):
    return prefix[:-1] + bytes([prefix[-1] + 1])


class Worker(threading.Thread):
    """One stream of random writes on its own keys through `endpoint`.

    Model (as of the last acknowledged write): keys {key: (value, create, mod, version, lease)},
    leases {id: set(keys)} live, revoked set, queue produced [(tail, revision)] and acked
    tails. muts [(revision, {key: 'put'|'delete'})] of every acknowledged write that made
    a revision. in_doubt: keys whose write failed, or None.
    """

    def __init__(self, endpoint, prefix, seed, stop_event, compact=False):
        super().__init__(daemon=True)
        self.channel = grpc.insecure_channel(endpoint, options=harness.CHANNEL_OPTIONS)
        self.kvs = rpc_pb2_grpc.KVStub(self.channel)
        self.leases_stub = rpc_pb2_grpc.LeaseStub(self.channel)
        self.prefix = prefix
        self.queue = b"crash-" + prefix.replace(b"/", b"-")
        self.rng = random.Random(seed)
        self.stop_event = stop_event
        self.compact = compact
        self.keys = {}
        self.leases = {}
        self.revoked = set()
        self.produced = []
        self.acked_tails = set()
        self.muts = []
        self.compacted = 0
        self.compact_tried = 0
        self.in_doubt = None
        self.doubt_leases = set()
        self.error = None
        self.n = 0

    def _key(self):
        return self.prefix + b"k%02d" % self.rng.randrange(24)

    def _put_model(self, key, value, rev, lease=0):
        old = self.keys.get(key)
        if old and old[4]:
            self.leases.get(old[4], set()).discard(key)
        create, version = (old[1], old[3] + 1) if old else (rev, 1)
        self.keys[key] = (value, create, rev, version, lease)
        if lease:
            self.leases[lease].add(key)

    def _delete_model(self, key):
        old = self.keys.pop(key, None)
        if old and old[4]:
            self.leases.get(old[4], set()).discard(key)
        return old is not None

    def step(self):
        self.n += 1
        op = self.rng.random()
        value = b"%s#%d" % (self.prefix, self.n) + b"x" * self.rng.randrange(VALUE_BYTES)
        if op < 0.35:
            key = self._key()
            self.in_doubt = {key}
            r = self.kvs.Put(pb.PutRequest(key=key, value=value), timeout=RPC_TIMEOUT_S)
            rev = r.header.revision
            self._put_model(key, value, rev)
            self.muts.append((rev, {key: "put"}))
        elif op < 0.50:
            key = self._key()
            self.in_doubt = {key}
            r = self.kvs.DeleteRange(pb.DeleteRangeRequest(key=key), timeout=RPC_TIMEOUT_S)
            existed = self._delete_model(key)
            if r.deleted != int(existed):
                raise AssertionError("delete of %r deleted %d, the model says %s" % (key, r.deleted, existed))
            if existed:
                self.muts.append((r.header.revision, {key: "delete"}))
        elif op < 0.70:
            a, b, c = self._key(), self._key(), self._key()
            if len({a, b, c}) < 3:
                return
            version = self.keys[a][3] if a in self.keys else 0
            self.in_doubt = {a, b, c}
            ops = [pb.RequestOp(request_put=pb.PutRequest(key=a, value=value)),
                   pb.RequestOp(request_put=pb.PutRequest(key=b, value=value + b"b")),
                   pb.RequestOp(request_delete_range=pb.DeleteRangeRequest(key=c))]
            cmp = pb.Compare(key=a, target=pb.Compare.VERSION, result=pb.Compare.EQUAL, version=version)
            r = self.kvs.Txn(pb.TxnRequest(compare=[cmp], success=ops,
                                           failure=[pb.RequestOp(request_range=pb.RangeRequest(key=a))]),
                             timeout=RPC_TIMEOUT_S)
            if not r.succeeded:
                raise AssertionError("txn on %r at version %d failed: the model is wrong" % (a, version))
            rev = r.header.revision
            self._put_model(a, value, rev)
            self._put_model(b, value + b"b", rev)
            changes = {a: "put", b: "put"}
            if self._delete_model(c):
                changes[c] = "delete"
            self.muts.append((rev, changes))
        elif op < 0.78:
            self.in_doubt = set()
            r = self.leases_stub.LeaseGrant(pb.LeaseGrantRequest(TTL=LEASE_TTL_S), timeout=RPC_TIMEOUT_S)
            self.leases[r.ID] = set()
            key = self._key()
            self.in_doubt = {key}
            r2 = self.kvs.Put(pb.PutRequest(key=key, value=value, lease=r.ID), timeout=RPC_TIMEOUT_S)
            self._put_model(key, value, r2.header.revision, r.ID)
            self.muts.append((r2.header.revision, {key: "put"}))
        elif op < 0.82 and self.leases:
            lease = self.rng.choice(sorted(self.leases))
            keys = set(self.leases[lease])
            self.in_doubt = keys
            self.doubt_leases = {lease}
            r = self.leases_stub.LeaseRevoke(pb.LeaseRevokeRequest(ID=lease), timeout=RPC_TIMEOUT_S)
            for k in keys:
                self._delete_model(k)
            del self.leases[lease]
            self.revoked.add(lease)
            if keys:
                self.muts.append((r.header.revision, {k: "delete" for k in keys}))
        elif op < 0.89:
            tail = b"t%06d" % self.n
            self.in_doubt = {b"queue"}
            r = self.kvs.Put(pb.PutRequest(key=b"/q/%s/p/%s" % (self.queue, tail), value=value),
                             timeout=RPC_TIMEOUT_S)
            self.produced.append((tail, r.header.revision))
            self.muts.append((r.header.revision, {b"queue": "put"}))
        elif op < 0.95:
            pending = [t for t, _r in self.produced if t not in self.acked_tails]
            if not pending:
                return
            qprefix = b"/q/%s/" % self.queue
            r = self.kvs.Range(pb.RangeRequest(key=qprefix, range_end=_end(qprefix), limit=1),
                               timeout=RPC_TIMEOUT_S)
            if not r.kvs:
                raise AssertionError("queue %r is empty, %d messages unacked" % (self.queue, len(pending)))
            msg = r.kvs[0].key
            tail = msg.rsplit(b"/", 1)[1]
            if tail != pending[0]:
                raise AssertionError("queue %r's oldest message is %r, expected tail %r" % (
                    self.queue, msg, pending[0]))
            self.in_doubt = {b"queue"}
            r = self.kvs.DeleteRange(pb.DeleteRangeRequest(key=msg), timeout=RPC_TIMEOUT_S)
            if r.deleted != 1:
                raise AssertionError("ack of %r deleted %d" % (msg, r.deleted))
            self.acked_tails.add(tail)
            self.muts.append((r.header.revision, {b"queue": "delete"}))
        elif self.compact and len(self.muts) > 20:
            target = self.muts[-10][0]
            if target <= self.compacted:
                return
            self.in_doubt = set()
            self.compact_tried = max(self.compact_tried, target)
            try:
                self.kvs.Compact(pb.CompactionRequest(revision=target), timeout=RPC_TIMEOUT_S)
            except grpc.RpcError as e:
                if e.details() != COMPACTED:
                    raise
            self.compacted = max(self.compacted, target)
        self.in_doubt = None
        self.doubt_leases = set()

    def run(self):
        try:
            while not self.stop_event.is_set():
                self.step()
        except grpc.RpcError as e:
            self.error = "%s: %s" % (e.code(), e.details())
        except AssertionError as e:
            self.error = "model: %s" % e
            self.in_doubt = None
        finally:
            self.channel.close()


class Ledger:
    """Every worker's model across rounds. run_round() streams for `seconds`-ish and calls
    fault() at a random moment in it; workers whose write was in doubt end, their keys
    and queue keep being checked (in-doubt keys loosely), and fresh workers take over."""

    def __init__(self, rng, prefix=b"cw/", workers=3):
        self.rng = rng
        self.prefix = prefix
        self.n_workers = workers
        self.done = []
        self.generation = 0

    def run_round(self, endpoints, fault, min_s=0.3, max_s=1.2):
        stop = threading.Event()
        self.generation += 1
        ws = [Worker(endpoints[i % len(endpoints)], b"%sg%dw%d/" % (self.prefix, self.generation, i),
                     self.rng.random(), stop, compact=(i == 0)) for i in range(self.n_workers)]
        for w in ws:
            w.start()
        delay = self.rng.uniform(min_s, max_s)
        stop.wait(delay)
        fault()
        stop.set()
        for w in ws:
            w.join(RPC_TIMEOUT_S + 10)
            if w.is_alive():
                raise AssertionError("a worker hung after the fault")
            if w.error and w.error.startswith("model:"):
                raise AssertionError("%s: %s" % (w.prefix, w.error))
        self.done.extend(ws)
        return sum(len(w.muts) for w in ws), delay

    def compacted(self):
        return max([w.compacted for w in self.done] + [0])

    def check(self, kv, lease, context):
        """Checks one member's state (kv/lease: stubs on it) against every worker's model.
        Returns the member's current revision."""
        errors = []
        resp = kv.Range(pb.RangeRequest(key=self.prefix, range_end=_end(self.prefix), serializable=True),
                        timeout=30)
        current = resp.header.revision
        present = {x.key: x for x in resp.kvs}
        seen = set()
        for w in self.done:
            doubt = w.in_doubt or set()
            for x in present:
                if x.startswith(w.prefix):
                    seen.add(x)
                    if x not in w.keys and x not in doubt:
                        errors.append("key %r present, deleted or never written" % x)
            for key, (value, create, mod, version, _lease) in w.keys.items():
                if key in doubt:
                    continue
                x = present.get(key)
                if x is None:
                    errors.append("key %r lost (acknowledged at revision %d)" % (key, mod))
                elif (x.value, x.create_revision, x.mod_revision, x.version) != (value, create, mod, version):
                    errors.append("key %r reads (create %d, mod %d, version %d), acknowledged (%d, %d, %d)%s"
                                  % (key, x.create_revision, x.mod_revision, x.version, create, mod, version,
                                     "" if x.value == value else " with another value"))
            for lid, keys in w.leases.items():
                if lid in w.doubt_leases:
                    continue
                t = lease.LeaseTimeToLive(pb.LeaseTimeToLiveRequest(ID=lid, keys=True), timeout=10)
                if t.TTL <= 0:
                    errors.append("lease %x lost" % lid)
                elif set(t.keys) - doubt != keys - doubt:
                    errors.append("lease %x holds %s, acknowledged %s" % (lid, sorted(t.keys), sorted(keys)))
            for lid in w.revoked - w.doubt_leases:
                t = lease.LeaseTimeToLive(pb.LeaseTimeToLiveRequest(ID=lid), timeout=10)
                if t.TTL != -1:
                    errors.append("revoked lease %x is back (TTL %d)" % (lid, t.TTL))
            qprefix = b"/q/%s/" % w.queue
            q = kv.Range(pb.RangeRequest(key=qprefix, range_end=_end(qprefix), serializable=True), timeout=10)
            msgs = [(m.key.rsplit(b"/", 1)[1], m.mod_revision) for m in q.kvs if m.key.count(b"/") == 4]
            want = [(t, r) for t, r in w.produced if t not in w.acked_tails]
            if b"queue" in doubt:
                # One produce or one ack in doubt: one message more or fewer, at either end.
                ok = msgs in (want, want[1:]) or msgs[:len(want)] == want and len(msgs) == len(want) + 1
            else:
                ok = msgs == want
            if not ok:
                errors.append("queue %r holds %s, acknowledged %s" % (w.queue, msgs[:8], want[:8]))
        if errors:
            raise AssertionError("%s: %d mismatches, e.g.:\n  %s" % (context, len(errors), "\n  ".join(errors[:10])))
        return current

    def check_history(self, kv, watch_channel, current, context):
        """Watches from the last acknowledged compaction (or revision 2) to `current`: every
        revision there has events, and each acknowledged write's keys changed at its revision.
        Revisions of acknowledged writes are unique. A Range below the compaction is refused."""
        muts = [m for w in self.done for m in w.muts]
        revs = [r for r, _c in muts]
        dup = sorted({r for r in revs if revs.count(r) > 1})
        if dup:
            raise AssertionError("%s: revisions acknowledged twice: %s" % (context, dup[:10]))
        compacted = self.compacted()
        if compacted > 1:
            try:
                kv.Range(pb.RangeRequest(key=b"\0", revision=compacted - 1, serializable=True), timeout=10)
                raise AssertionError("%s: a Range at %d, below the acknowledged compaction at %d, answered"
                                     % (context, compacted - 1, compacted))
            except grpc.RpcError as e:
                if (e.code(), e.details()) != (grpc.StatusCode.OUT_OF_RANGE, COMPACTED):
                    raise
        start = max(compacted, 2)
        tried = max([w.compact_tried for w in self.done] + [0])
        events = None
        while events is None:
            events = {}
            req = pb.WatchRequest(create_request=pb.WatchCreateRequest(key=b"\0", range_end=b"\0",
                                                                       start_revision=start))
            stream = rpc_pb2_grpc.WatchStub(watch_channel).Watch(iter([req]), timeout=30)
            try:
                for r in stream:
                    if r.compact_revision:
                        # A compaction whose answer was lost may have been applied.
                        if not start < r.compact_revision <= tried:
                            raise AssertionError("%s: watch from %d compacted at %d (acknowledged %d, asked %d)"
                                                 % (context, start, r.compact_revision, compacted, tried))
                        start, events = r.compact_revision, None
                        break
                    for e in r.events:
                        events.setdefault(e.kv.mod_revision, {})[e.kv.key] = (
                            "delete" if e.type == 1 else "put")
                    if events and max(events) >= current:
                        break
            finally:
                stream.cancel()
        if revs and max(revs) > current:
            raise AssertionError("%s: at revision %d, below the acknowledged %d" % (context, current, max(revs)))
        missing = [r for r in range(start, current + 1) if r not in events]
        if missing:
            raise AssertionError("%s: no events at revisions %s (history %d..%d)" % (
                context, missing[:10], start, current))
        for rev, changes in muts:
            if rev < start:
                continue
            got = events.get(rev, {})
            for key, kind in changes.items():
                if key == b"queue":
                    if not any(k.startswith(b"/q/") for k in got):
                        raise AssertionError("%s: revision %d: no queue event" % (context, rev))
                elif got.get(key) != kind:
                    raise AssertionError("%s: revision %d: %r %s acknowledged, history has %s" % (
                        context, rev, key, kind, sorted(got.items())[:6]))
