"""Start, crash, restart, grow and shrink a multi-member etcd-compatible cluster
for integration tests.

The binary is $ETCDQ_BIN (build/etcdq), else Debian's /usr/bin/etcd 3.4, the
oracle every expectation here was checked against. Members get etcd's own
flags only, so both binaries run unchanged.

    c = Cluster(3, heartbeat_ms=50, election_ms=500)   # started; every member serving
    i = c.leader_index()                                 # which member leads now
    c.kv(i), c.maintenance(i), c.cluster_stub(i)         # raw etcdserverpb stubs
    c.client(i)                                          # python-etcd3 client
    c.etcdctl_json("endpoint", "status", "--cluster")    # etcdctl on every live endpoint
    c.kill9(i); c.restart(i)                             # same data dir, same ports
    j = c.add_member(learner=True); c.promote(j)         # MemberAdd, start with "existing"
    c.remove_member(k); c.move_leader(j)
    c.cleanup()                                          # always; also run at exit

Each member is a harness.Member (tests/integration/harness.py): its own temp
dir with data dir and server.log, its own session, killed and removed by
cleanup(), by the harness's atexit hook and by its SIGTERM/SIGINT/SIGHUP
handler (ETCDQ_KEEP_TEST_DIRS=1 keeps the dirs). ClusterTestCase prints every
member's log tail when a test fails.

python-etcd3 0.12 (Debian) compiles etcd 3.3's protos: no learners, no
MemberPromote, no Status.raftAppliedIndex. `v35` below declares the few
etcd 3.4/3.5 messages the cluster tests need (wire-compatible, field numbers
from proto/etcd/api/etcdserverpb/rpc.proto) in a private descriptor pool.

Run with /usr/bin/python3 (Debian's python3-etcd3 and python3-grpcio).
"""
import json
import os
import signal
import subprocess
import sys
import threading
import time
import unittest
import uuid

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(_HERE, os.pardir, "integration"))

import grpc  # noqa: E402
from etcd3.etcdrpc import rpc_pb2, rpc_pb2_grpc  # noqa: E402
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory  # noqa: E402

import harness  # noqa: E402
from watchlib import prefix_end  # noqa: E402,F401 (tests import it from here)
from harness import CHANNEL_OPTIONS, all_keys_request, binary_under_test  # noqa: E402

is_reference_etcd = harness.is_reference_etcd   # for the tests: True when the binary is Debian's etcd
sanitized = harness.sanitized                   # True under scripts/checks.sh: timings are the sanitizer's

ETCDCTL = harness.ETCDCTL
NOT_IN_SYNC = "etcdserver: can only promote a learner member which is in sync with leader"
# Under ThreadSanitizer a restarted member can take 20 s and more to load its
# Raft log: libraft grows its entries array by one batch at a time
# (extendEntries, uv_segment.c), and TSan's realloc always copies where
# glibc's grows in place, so loading is quadratic there (8,000 entries: 6 s
# under TSan on this machine, 12 ms in the normal build).
CLUSTER_START_TIMEOUT_S = 90.0 if sanitized() else 30.0
RPC_TIMEOUT_S = 5.0


def varint(n):
    """n as a protobuf base-128 varint (the member-only call tests build raw messages)."""
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def read_varint(buf, i):
    """A protobuf varint in `buf` at `i`: (value, index after it). For tests that read a
    message's wire bytes themselves."""
    value = shift = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, i


# ---- etcd 3.4/3.5 messages python-etcd3 0.12 lacks ----------------------------

def _build_v35():
    F = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="etcdq_cluster_test_v35.proto",
                                             package="etcdq_cluster_test_v35", syntax="proto3")

    def message(name, *fields):
        m = fdp.message_type.add(name=name)
        for number, fname, ftype, repeated, type_name in fields:
            f = m.field.add(name=fname, number=number, type=ftype,
                            label=F.LABEL_REPEATED if repeated else F.LABEL_OPTIONAL)
            if type_name:
                f.type_name = ".etcdq_cluster_test_v35." + type_name

    U64, I64, STR, BOOL, MSG = F.TYPE_UINT64, F.TYPE_INT64, F.TYPE_STRING, F.TYPE_BOOL, F.TYPE_MESSAGE
    message("ResponseHeader", (1, "cluster_id", U64, False, None), (2, "member_id", U64, False, None),
            (3, "revision", I64, False, None), (4, "raft_term", U64, False, None))
    message("Member", (1, "ID", U64, False, None), (2, "name", STR, False, None),
            (3, "peerURLs", STR, True, None), (4, "clientURLs", STR, True, None),
            (5, "isLearner", BOOL, False, None))
    message("MemberAddRequest", (1, "peerURLs", STR, True, None), (2, "isLearner", BOOL, False, None))
    message("MemberAddResponse", (1, "header", MSG, False, "ResponseHeader"),
            (2, "member", MSG, False, "Member"), (3, "members", MSG, True, "Member"))
    message("MemberRemoveRequest", (1, "ID", U64, False, None))
    message("MemberListRequest", (1, "linearizable", BOOL, False, None))
    message("MemberPromoteRequest", (1, "ID", U64, False, None))
    message("MembersResponse", (1, "header", MSG, False, "ResponseHeader"),
            (2, "members", MSG, True, "Member"))
    message("StatusRequest")
    message("StatusResponse", (1, "header", MSG, False, "ResponseHeader"), (2, "version", STR, False, None),
            (3, "dbSize", I64, False, None), (4, "leader", U64, False, None),
            (5, "raftIndex", U64, False, None), (6, "raftTerm", U64, False, None),
            (7, "raftAppliedIndex", U64, False, None), (8, "errors", STR, True, None),
            (9, "dbSizeInUse", I64, False, None), (10, "isLearner", BOOL, False, None))
    message("MoveLeaderRequest", (1, "targetID", U64, False, None))
    message("MoveLeaderResponse", (1, "header", MSG, False, "ResponseHeader"))

    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(fdp.SerializeToString())
    fd = pool.FindFileByName(fdp.name)
    classes = {}
    for name in fd.message_types_by_name:
        desc = fd.message_types_by_name[name]
        if hasattr(message_factory, "GetMessageClass"):
            classes[name] = message_factory.GetMessageClass(desc)
        else:
            classes[name] = message_factory.MessageFactory(pool).GetPrototype(desc)
    return type("v35", (), classes)


v35 = _build_v35()


class ClusterStub35:
    """etcdserverpb.Cluster and the Maintenance calls whose 3.4+ fields the tests read."""

    def __init__(self, channel):
        def call(path, req, resp):
            return channel.unary_unary(path, request_serializer=req.SerializeToString,
                                       response_deserializer=resp.FromString)
        self.MemberAdd = call("/etcdserverpb.Cluster/MemberAdd", v35.MemberAddRequest, v35.MemberAddResponse)
        # MemberRemove/List/Promote responses share one shape: header (1), members (2).
        self.MemberRemove = call("/etcdserverpb.Cluster/MemberRemove", v35.MemberRemoveRequest, v35.MembersResponse)
        self.MemberList = call("/etcdserverpb.Cluster/MemberList", v35.MemberListRequest, v35.MembersResponse)
        self.MemberPromote = call("/etcdserverpb.Cluster/MemberPromote", v35.MemberPromoteRequest,
                                  v35.MembersResponse)
        self.Status = call("/etcdserverpb.Maintenance/Status", v35.StatusRequest, v35.StatusResponse)
        self.MoveLeader = call("/etcdserverpb.Maintenance/MoveLeader", v35.MoveLeaderRequest,
                               v35.MoveLeaderResponse)


def rpc_error_text(e):
    return "%s: %s" % (e.code().name, e.details())


# ---- one member of a cluster ------------------------------------------------------

class ClusterMember(harness.Member):
    """A harness.Member whose flags make it one member of `cluster`."""

    def __init__(self, cluster, name):
        self.cluster = cluster
        self.initial_cluster = None      # the --initial-cluster it starts with
        self.initial_state = "new"
        self.learner = False
        self.removed = False
        self.id = None                   # raft member id, once a Status or MemberAdd told it
        super().__init__(extra_args=cluster.extra_args, name=name, binary=cluster.binary, start=False)

    def args(self):
        c = self.cluster
        a = [self.binary,
             "--name", self.name,
             "--data-dir", self.data_dir,
             "--listen-client-urls", self.client_url,
             "--advertise-client-urls", self.client_url,
             "--listen-peer-urls", self.peer_url,
             "--initial-advertise-peer-urls", self.peer_url,
             "--initial-cluster", self.initial_cluster,
             "--initial-cluster-state", self.initial_state,
             "--initial-cluster-token", c.token,
             "--heartbeat-interval", str(c.heartbeat_ms),
             "--election-timeout", str(c.election_ms)]
        if c.snapshot_count is not None:
            a += ["--snapshot-count", str(c.snapshot_count)]
        return a + self.extra_args

    def spawn(self):
        """Starts the process and returns at once (a member alone cannot serve until a quorum is up)."""
        if self.running():
            raise RuntimeError("member %s already running (pid %d)" % (self.name, self.proc.pid))
        self.starts += 1
        if self._log is None:
            self._log = open(self.log_path, "ab", buffering=0)
        self._log.write(("\n==== harness: start #%d at %s: %s\n" % (
            self.starts, time.strftime("%H:%M:%S"), " ".join(self.args()))).encode())
        self.proc = subprocess.Popen(self.args(), stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def start(self, timeout=CLUSTER_START_TIMEOUT_S, wait=True):
        self.spawn()
        if wait:
            self.wait_serving(timeout)

    def restart(self, timeout=CLUSTER_START_TIMEOUT_S, extra_args=None, wait=True):
        if self.running():
            self.stop()
        if extra_args is not None:
            self.extra_args = list(extra_args)
        self.start(timeout, wait)

    def status(self, timeout=1.0, channel=None):
        """Maintenance.Status on a fresh channel (a channel to a killed member backs off for seconds)."""
        ch = channel or grpc.insecure_channel(self.endpoint, options=CHANNEL_OPTIONS)
        try:
            st = ClusterStub35(ch).Status(v35.StatusRequest(), timeout=timeout)
        finally:
            if channel is None:
                ch.close()
        self.id = st.header.member_id
        return st

    def wait_serving(self, timeout=CLUSTER_START_TIMEOUT_S):
        """Returns once Status names a leader and (for a voter) a linearizable Range answers."""
        deadline = time.monotonic() + timeout
        last_error = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise harness.MemberStartError("%s exited with status %s while starting\n%s" % (
                    self.binary, self.proc.returncode, self.log_tail()))
            ch = grpc.insecure_channel(self.endpoint, options=CHANNEL_OPTIONS)
            try:
                st = self.status(timeout=1.0, channel=ch)
                if st.leader == 0:
                    last_error = "Status: no leader yet"
                elif st.isLearner:
                    return
                else:
                    rpc_pb2_grpc.KVStub(ch).Range(rpc_pb2.RangeRequest(key=b"harness-probe"), timeout=2.0)
                    return
            except grpc.RpcError as e:
                last_error = rpc_error_text(e)
            finally:
                ch.close()
            time.sleep(0.05)
        tail = self.log_tail()
        self._kill_process()
        raise harness.MemberStartError("%s (%s) did not serve within %.0f s (last error: %s)\n%s" % (
            self.name, self.binary, timeout, last_error, tail))

    def __repr__(self):
        return "ClusterMember(%s, %s, id=%s, pid=%s)" % (
            self.name, self.endpoint, "%x" % self.id if self.id else None,
            self.proc.pid if self.proc else None)


# ---- the cluster -------------------------------------------------------------------

class Cluster:
    """N members bootstrapped together (--initial-cluster-state new), members m0..m{N-1}.

    Members are addressed by index into self.members; an index stays valid after
    the member is killed or removed (then it is skipped by endpoints() and friends).
    """

    def __init__(self, size=3, heartbeat_ms=100, election_ms=1000, snapshot_count=None,
                 extra_args=(), binary=None, start=True, timeout=CLUSTER_START_TIMEOUT_S):
        self.binary = binary or binary_under_test()
        self.heartbeat_ms = heartbeat_ms
        self.election_ms = election_ms
        self.snapshot_count = snapshot_count
        self.extra_args = list(extra_args)
        self.token = "etcdq-test-%d-%s" % (os.getpid(), uuid.uuid4().hex[:8])
        self.members = []
        self._stubs = {}
        try:
            for i in range(size):
                self.members.append(ClusterMember(self, "m%d" % i))
            initial = ",".join("%s=%s" % (m.name, m.peer_url) for m in self.members)
            for m in self.members:
                m.initial_cluster = initial
            if start:
                for m in self.members:
                    m.spawn()
                self.wait_serving(timeout=timeout)
        except BaseException:
            self.cleanup()
            raise

    # ---- lifecycle ---------------------------------------------------------------

    def __len__(self):
        return len(self.members)

    def __getitem__(self, i):
        return self.members[i]

    def live(self):
        """Indexes of the members whose process runs (removed members excluded)."""
        return [i for i, m in enumerate(self.members) if not m.removed and m.running()]

    def voters(self):
        return [i for i in self.live() if not self.members[i].learner]

    def wait_serving(self, indexes=None, timeout=CLUSTER_START_TIMEOUT_S):
        deadline = time.monotonic() + timeout
        for i in (self.live() if indexes is None else indexes):
            self.members[i].wait_serving(max(1.0, deadline - time.monotonic()))

    def kill9(self, *indexes):
        """SIGKILLs the given members, all signals sent before any is waited for."""
        killed = [i for i in indexes if self.members[i].running()]
        for i in killed:
            try:
                os.killpg(self.members[i].proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for i in killed:
            self.members[i]._kill_process()   # reaps it
            self.members[i]._log_note("SIGKILLed")
        for i in indexes:
            self._drop_stubs(i)

    def stop(self, i):
        self._drop_stubs(i)
        return self.members[i].stop()

    def restart(self, i, wait=True, timeout=CLUSTER_START_TIMEOUT_S):
        """Starts member i again on its data dir and ports (SIGTERM first if it runs)."""
        self._drop_stubs(i)
        self.members[i].restart(timeout=timeout, wait=wait)

    def cleanup(self):
        for m in self.members:
            try:
                m.cleanup()
            except Exception:
                pass
        self._stubs.clear()

    def log_tails(self, lines=harness.LOG_TAIL_LINES):
        return "\n".join("%r\n%s" % (m, m.log_tail(lines)) for m in self.members)

    # ---- clients -------------------------------------------------------------------

    def endpoints(self, indexes=None):
        """host:port,host:port of the given (default: live) members, for etcdctl --endpoints."""
        return ",".join(self.members[i].endpoint for i in (self.live() if indexes is None else indexes))

    def _stub(self, i, kind):
        key = (i, kind)
        if key not in self._stubs:
            ch = self.members[i].channel()
            self._stubs[key] = {"kv": rpc_pb2_grpc.KVStub, "maintenance": rpc_pb2_grpc.MaintenanceStub,
                                "cluster": rpc_pb2_grpc.ClusterStub, "cluster35": ClusterStub35}[kind](ch)
        return self._stubs[key]

    def _drop_stubs(self, i):
        # The next call gets a fresh channel: one that saw the member die backs off for ~2 s.
        for key in [k for k in self._stubs if k[0] == i]:
            del self._stubs[key]

    def kv(self, i):
        return self._stub(i, "kv")

    def maintenance(self, i):
        return self._stub(i, "maintenance")

    def cluster_stub(self, i):
        """python-etcd3's etcdserverpb.Cluster stub (etcd 3.3 messages: no isLearner)."""
        return self._stub(i, "cluster")

    def cluster35(self, i):
        """MemberAdd/Remove/List/Promote, Status and MoveLeader with etcd 3.4+ fields."""
        return self._stub(i, "cluster35")

    def client(self, i, timeout=10):
        return self.members[i].client(timeout=timeout)

    def etcdctl(self, *args, endpoints=None, timeout=60, check=True):
        """Runs etcdctl (API v3) against `endpoints` (default: every live member); returns stdout."""
        cmd = [ETCDCTL, "--endpoints", endpoints or self.endpoints(), "--dial-timeout", "3s",
               "--command-timeout", "10s"] + list(args)
        p = subprocess.run(cmd, env=dict(os.environ, ETCDCTL_API="3"), capture_output=True,
                           text=True, timeout=timeout)
        if check and p.returncode != 0:
            raise AssertionError("%s exited %d\nstdout: %s\nstderr: %s" % (
                " ".join(cmd), p.returncode, p.stdout, p.stderr))
        return p.stdout if check else p

    def etcdctl_json(self, *args, **kw):
        return json.loads(self.etcdctl(*(list(args) + ["-w", "json"]), **kw))

    # ---- status and leadership ---------------------------------------------------------

    def status(self, i, timeout=1.0):
        return self.members[i].status(timeout=timeout)

    def statuses(self, indexes=None, timeout=1.0):
        """{index: StatusResponse or the RpcError} for the given (default: live) members."""
        out = {}
        for i in (self.live() if indexes is None else indexes):
            try:
                out[i] = self.status(i, timeout)
            except grpc.RpcError as e:
                out[i] = e
        return out

    def member_id(self, i):
        if self.members[i].id is None:
            self.status(i, timeout=RPC_TIMEOUT_S)
        return self.members[i].id

    def index_of_id(self, member_id):
        for i, m in enumerate(self.members):
            if m.id == member_id:
                return i
        return None

    def leader_now(self, indexes=None, exclude_ids=()):
        """Index of a live member that says it is the leader (Status.leader == its own id), else None."""
        for i, st in self.statuses(indexes).items():
            if isinstance(st, grpc.RpcError):
                continue
            if st.leader != 0 and st.leader == st.header.member_id and st.leader not in exclude_ids:
                return i
        return None

    def wait_leader(self, timeout=30.0, exclude_ids=(), poll_s=0.02):
        """Polls Status on every live member until one of them says it leads; returns its index."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            i = self.leader_now(exclude_ids=exclude_ids)
            if i is not None:
                return i
            time.sleep(poll_s)
        raise AssertionError("no leader (other than %s) within %.0f s; statuses: %s\n%s" % (
            ["%x" % x for x in exclude_ids], timeout, self.statuses(), self.log_tails()))

    def leader_index(self, timeout=30.0):
        return self.wait_leader(timeout)

    # ---- membership ----------------------------------------------------------------------

    def member_list(self, via=None, timeout=RPC_TIMEOUT_S):
        i = via if via is not None else self.voters()[0]
        return self.cluster35(i).MemberList(v35.MemberListRequest(), timeout=timeout)

    def add_member(self, learner=False, start=True, via=None, timeout=CLUSTER_START_TIMEOUT_S, add_timeout=20.0):
        """MemberAdd (gRPC) on a live voter, then starts the new member with
        --initial-cluster-state existing and the --initial-cluster etcdctl would print.
        Returns the new member's index; its MemberAddResponse is in self.last_member_add and
        the refusals before it in self.member_add_refusals [(monotonic time, text)]."""
        m = ClusterMember(self, "m%d" % len(self.members))
        self.members.append(m)
        # etcd's --strict-reconfig-check refuses a MemberAdd with "etcdserver: unhealthy
        # cluster" until every voter has been connected to the leader for 5 s
        # (etcdserver.HealthInterval), e.g. just after the cluster started: retry.
        self.member_add_refusals = []
        deadline = time.monotonic() + add_timeout
        while True:
            i = via if via is not None else self.leader_index()
            try:
                resp = self.cluster35(i).MemberAdd(
                    v35.MemberAddRequest(peerURLs=[m.peer_url], isLearner=learner), timeout=RPC_TIMEOUT_S)
                break
            except grpc.RpcError as e:
                self.member_add_refusals.append((time.monotonic(), rpc_error_text(e)))
                if time.monotonic() > deadline or "unhealthy cluster" not in e.details():
                    raise
                time.sleep(0.2)
        self.last_member_add = resp
        m.id = resp.member.ID
        m.learner = learner
        m.initial_state = "existing"
        m.initial_cluster = initial_cluster_like_etcdctl(resp, m.name)
        if start:
            m.start(timeout=timeout)
        return len(self.members) - 1

    def promote(self, i, timeout=60.0):
        """MemberPromote until etcd takes it: a learner not yet in sync with the leader is
        refused with NOT_IN_SYNC (FAILED_PRECONDITION), so retry that; raise anything else.
        Returns (MembersResponse, [distinct refusal texts seen])."""
        deadline = time.monotonic() + timeout
        refusals = []
        while True:
            via = self.leader_index()
            try:
                resp = self.cluster35(via).MemberPromote(v35.MemberPromoteRequest(ID=self.member_id(i)),
                                                         timeout=RPC_TIMEOUT_S)
                self.members[i].learner = False
                return resp, refusals
            except grpc.RpcError as e:
                text = rpc_error_text(e)
                if text not in refusals:
                    refusals.append(text)
                if NOT_IN_SYNC not in e.details():
                    raise
                if time.monotonic() > deadline:
                    raise AssertionError("could not promote %r within %.0f s: %s" % (
                        self.members[i], timeout, refusals))
                time.sleep(0.2)

    def remove_member(self, i, via=None, exit_timeout=15.0):
        """MemberRemove on a live voter; waits for the removed member to exit by itself
        (etcd does), else stops it. Returns (MembersResponse, exit status, exited_by_itself)."""
        m = self.members[i]
        mid = self.member_id(i)
        via = via if via is not None else next(j for j in self.voters() if j != i)
        resp = self.cluster35(via).MemberRemove(v35.MemberRemoveRequest(ID=mid), timeout=RPC_TIMEOUT_S)
        m.removed = True
        self._drop_stubs(i)
        exited = True
        try:
            m.proc.wait(exit_timeout)
        except subprocess.TimeoutExpired:
            exited = False
            m.stop()
        return resp, m.proc.returncode, exited

    def move_leader(self, i):
        """`etcdctl move-leader <id of member i>` on every live endpoint; returns its stdout."""
        return self.etcdctl("move-leader", "%x" % self.member_id(i))

    # ---- data checks -----------------------------------------------------------------------

    def serializable_range(self, i, prefix=None, timeout=30.0):
        """{key: (value, mod_revision)} and header revision of member i's own applied state."""
        if prefix is None:
            req = all_keys_request(serializable=True)
        else:
            req = rpc_pb2.RangeRequest(key=prefix, range_end=prefix_end(prefix), serializable=True)
        resp = self.kv(i).Range(req, timeout=timeout)
        return {kv.key: (kv.value, kv.mod_revision) for kv in resp.kvs}, resp.header.revision

    def wait_applied_revision(self, revision, indexes=None, timeout=30.0):
        """Waits until a serializable read on each member is at `revision` or later."""
        deadline = time.monotonic() + timeout
        for i in (self.live() if indexes is None else indexes):
            while True:
                try:
                    r = self.kv(i).Range(rpc_pb2.RangeRequest(key=b"\0", serializable=True, count_only=True),
                                         timeout=2.0)
                    if r.header.revision >= revision:
                        break
                    last = "at revision %d" % r.header.revision
                except grpc.RpcError as e:
                    last = rpc_error_text(e)
                if time.monotonic() > deadline:
                    raise AssertionError("%r did not reach revision %d within %.0f s (%s)" % (
                        self.members[i], revision, timeout, last))
                time.sleep(0.05)

    def assert_acked_everywhere(self, acked, prefix, indexes=None, timeout=30.0):
        """Every acknowledged put {key: (value, revision)} is on every member (serializable
        read of the member's own state), with the revision its Put answer carried.
        Returns {index: header revision of its read}."""
        indexes = self.live() if indexes is None else indexes
        if acked:
            self.wait_applied_revision(max(rev for _v, rev in acked.values()), indexes, timeout)
        revisions = {}
        for i in indexes:
            have, rev = self.serializable_range(i, prefix)
            revisions[i] = rev
            missing = [k for k in acked if k not in have]
            wrong = [(k, acked[k], have[k]) for k in acked if k in have and have[k] != acked[k]]
            if missing or wrong:
                raise AssertionError("%r: %d of %d acknowledged puts missing (e.g. %s), %d differ (e.g. %s)" % (
                    self.members[i], len(missing), len(acked), missing[:5], len(wrong), wrong[:5]))
        return revisions

    def assert_same_hashkv(self, testcase):
        """`etcdctl endpoint hashkv --cluster` at one revision every member has applied:
        the same hash everywhere. Returns etcdctl's parsed JSON."""
        rev = max(self.kv(i).Range(rpc_pb2.RangeRequest(key=b"\0", count_only=True), timeout=10).header.revision
                  for i in self.voters())
        self.wait_applied_revision(rev)
        out = self.etcdctl_json("endpoint", "hashkv", "--cluster", "--rev", str(rev))
        testcase.assertEqual(len(out), len(self.live()), out)
        hashes = {e["Endpoint"]: e["HashKV"]["hash"] for e in out}
        testcase.assertEqual(len(set(hashes.values())), 1, "hashkv differs: %s" % hashes)
        return out


def initial_cluster_like_etcdctl(add_resp, new_name):
    """The ETCD_INITIAL_CLUSTER `etcdctl member add` prints: name=peerURL for every member
    in the MemberAdd answer, the new one under its chosen name (etcdctl's command/member_command.go)."""
    parts = []
    for mem in add_resp.members:
        name = new_name if mem.ID == add_resp.member.ID else mem.name
        for u in mem.peerURLs:
            parts.append("%s=%s" % (name, u))
    return ",".join(parts)


# ---- a background writer -------------------------------------------------------------------

class Attempt:
    __slots__ = ("key", "value", "target", "start", "end", "revision", "error")

    def __init__(self, key, value, target, start):
        self.key, self.value, self.target, self.start = key, value, target, start
        self.end = self.revision = self.error = None

    @property
    def ok(self):
        return self.revision is not None


class Writer:
    """Open-loop writer: every `interval` s it sends one Put of a fresh key to the next
    target member (round-robin, one channel per member), with a `deadline` s client
    deadline, without waiting for earlier Puts to finish. A Put stuck on a member
    that lost its leader therefore never holds back the next one, and the first
    success after a failure says when the cluster could commit again.

    acked(): {key: (value, revision)} of every acknowledged Put.
    `value_bytes` pads each value to at least that many bytes (a disk fills sooner).
    """

    def __init__(self, cluster, targets, prefix=b"w/", interval=0.02, deadline=2.0, max_in_flight=400,
                 value_bytes=0):
        self.cluster = cluster
        self.value_bytes = value_bytes
        self.prefix = prefix
        self.interval = interval
        self.deadline = deadline
        self.max_in_flight = max_in_flight
        self.attempts = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._in_flight = 0
        self._stubs = {}
        self._targets = []
        self.set_targets(targets)
        self._thread = threading.Thread(target=self._run, name="cluster-writer", daemon=True)

    def set_targets(self, targets):
        with self._lock:
            for i in targets:
                if i not in self._stubs:
                    self._stubs[i] = self.cluster.members[i].kv()
            self._targets = list(targets)

    def start(self):
        self._thread.start()
        return self

    def stop(self, settle_s=None):
        """Stops sending and waits for every Put in flight to finish."""
        self._stop.set()
        self._thread.join()
        deadline = time.monotonic() + (settle_s if settle_s is not None else self.deadline + 5.0)
        while time.monotonic() < deadline:
            with self._lock:
                if self._in_flight == 0:
                    return
            time.sleep(0.01)
        raise AssertionError("%d Puts still in flight after their deadline" % self._in_flight)

    def _run(self):
        n = 0
        next_at = time.monotonic()
        while not self._stop.is_set():
            with self._lock:
                targets = self._targets
                busy = self._in_flight >= self.max_in_flight
            if targets and not busy:
                target = targets[n % len(targets)]
                key = b"%s%08d" % (self.prefix, n)
                value = b"v%d-to-m%d" % (n, target)
                value += b"." * max(0, self.value_bytes - len(value))
                a = Attempt(key, value, target, time.monotonic())
                with self._lock:
                    self.attempts.append(a)
                    self._in_flight += 1
                    stub = self._stubs[target]
                try:
                    fut = stub.Put.future(rpc_pb2.PutRequest(key=key, value=value), timeout=self.deadline)
                    fut.add_done_callback(lambda f, a=a: self._done(a, f))
                except Exception as e:   # e.g. a closed channel
                    self._finish(a, None, "%s: %s" % (type(e).__name__, e))
                n += 1
            next_at += self.interval
            delay = next_at - time.monotonic()
            if delay > 0:
                self._stop.wait(delay)
            else:
                next_at = time.monotonic()

    def _done(self, a, fut):
        try:
            resp = fut.result()
            self._finish(a, resp.header.revision, None)
        except grpc.RpcError as e:
            self._finish(a, None, rpc_error_text(e))
        except Exception as e:
            self._finish(a, None, "%s: %s" % (type(e).__name__, e))

    def _finish(self, a, revision, error):
        with self._lock:
            a.end = time.monotonic()
            a.revision, a.error = revision, error
            self._in_flight -= 1

    # ---- results ------------------------------------------------------------------------

    def snapshot(self):
        with self._lock:
            return [a for a in self.attempts if a.end is not None]

    def acked(self):
        return {a.key: (a.value, a.revision) for a in self.snapshot() if a.ok}

    def failures(self, since=None, until=None):
        return [a for a in self.snapshot() if not a.ok
                and (since is None or a.start >= since) and (until is None or a.start <= until)]

    def successes(self, since=None):
        return [a for a in self.snapshot() if a.ok and (since is None or a.start >= since)]

    def first_success_after(self, t):
        """End time of the earliest-finishing successful Put sent at or after t, or None."""
        ends = [a.end for a in self.snapshot() if a.ok and a.start >= t]
        return min(ends) if ends else None

    def max_gap(self, since, until):
        """(length, start) of the longest time in [since, until] with no successful Put completing."""
        ends = sorted(a.end for a in self.snapshot() if a.ok and since <= a.end <= until)
        points = [since] + ends + [until]
        return max((b - a, a) for a, b in zip(points, points[1:]))

    def error_counts(self, attempts=None):
        counts = {}
        for a in (self.failures() if attempts is None else attempts):
            counts[a.error] = counts.get(a.error, 0) + 1
        return counts


# ---- test case base --------------------------------------------------------------------------

def first_linearizable_read_s(member, since, timeout=60):
    """Seconds from `since` (time.monotonic()) until `member` answers a linearizable
    Range (each try on a fresh channel with a 0.5 s deadline, tries 10 ms apart)."""
    deadline = since + timeout
    while time.monotonic() < deadline:
        try:
            with grpc.insecure_channel(member.endpoint, options=CHANNEL_OPTIONS) as ch:
                rpc_pb2_grpc.KVStub(ch).Range(rpc_pb2.RangeRequest(key=b"foo"), timeout=0.5)
            return time.monotonic() - since
        except grpc.RpcError:
            time.sleep(0.01)
    raise AssertionError("%r answered no linearizable read within %d s" % (member, timeout))


class ClusterTestCase(harness.CleanupTestCase):
    """Clusters made with self.new_cluster() are cleaned up after the test, those made
    with cls.new_class_cluster() (in setUpClass) after the class; when a test fails,
    the log tails of every member of both go to stderr first."""

    @classmethod
    def new_class_cluster(cls, *args, **kwargs):
        return cls.track_class(Cluster(*args, **kwargs))

    def new_cluster(self, *args, **kwargs):
        return self.track(Cluster(*args, **kwargs))

    def log_text(self, c):
        return "member logs\n%s" % c.log_tails()

    def note(self, text):
        """A measurement or observation, printed with the test's output."""
        sys.stderr.write("    [%s] %s\n" % (self._testMethodName, text))


def main():
    harness.main()
