#!/usr/bin/python3
"""Bad requests through raw gRPC stubs: the exact status code and message etcd
gives (clients match on the strings), and proof that the store did not change.

Every expectation here is what etcd 3.6 answers; run this file without
ETCDQ_BIN to check them against it again (the one difference kept, unix
peer URLs, says why).

    /usr/bin/python3 tests/integration/test_bad_input.py [-k pattern]
    ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/integration/test_bad_input.py
"""
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402
from etcd3.etcdrpc import rpc_pb2 as pb  # noqa: E402

import harness  # noqa: E402

INVALID_ARGUMENT = grpc.StatusCode.INVALID_ARGUMENT
OUT_OF_RANGE = grpc.StatusCode.OUT_OF_RANGE
NOT_FOUND = grpc.StatusCode.NOT_FOUND
RESOURCE_EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED

KEY_NOT_PROVIDED = "etcdserver: key is not provided"
TOO_MANY_OPS = "etcdserver: too many operations in txn request"
REQUEST_TOO_LARGE = "etcdserver: request is too large"
DUPLICATE_KEY = "etcdserver: duplicate key given in txn request"
COMPACTED = "etcdserver: mvcc: required revision has been compacted"
FUTURE_REV = "etcdserver: mvcc: required revision is a future revision"
LEASE_NOT_FOUND = "etcdserver: requested lease not found"
KEY_NOT_FOUND = "etcdserver: key not found"
VALUE_PROVIDED = "etcdserver: value is provided"
LEASE_PROVIDED = "etcdserver: lease is provided"

DEFAULT_MAX_REQUEST_BYTES = 1536 * 1024   # etcd's --max-request-bytes default (1.5 MiB)
GRPC_OVERHEAD_BYTES = 512 * 1024          # etcd lets gRPC take max-request-bytes + 512 KiB
DEFAULT_MAX_TXN_OPS = 128


# ---- request builders -------------------------------------------------------------------

def put_op(key, value=b"v", **kw):
    return pb.RequestOp(request_put=pb.PutRequest(key=key, value=value, **kw))


def range_op(key, range_end=b"", **kw):
    return pb.RequestOp(request_range=pb.RangeRequest(key=key, range_end=range_end, **kw))


def delete_op(key, range_end=b""):
    return pb.RequestOp(request_delete_range=pb.DeleteRangeRequest(key=key, range_end=range_end))


def txn_op(success=(), failure=(), compare=()):
    return pb.RequestOp(request_txn=pb.TxnRequest(compare=list(compare), success=list(success),
                                                  failure=list(failure)))


def version_is_0(key):
    return pb.Compare(key=key, result=pb.Compare.EQUAL, target=pb.Compare.VERSION, version=0)


def txn(success=(), failure=(), compare=()):
    return pb.TxnRequest(compare=list(compare), success=list(success), failure=list(failure))


class BadInputCase(harness.MemberTestCase):
    """Helpers shared by the classes below; each class starts its own member."""

    member_args = ()

    @classmethod
    def setUpClass(cls):
        cls.member = cls.new_class_member(extra_args=cls.member_args)
        cls.kv = cls.member.kv()

    def state(self):
        """(current revision, every key with value and metadata): what must not change."""
        resp = self.kv.Range(harness.all_keys_request(), timeout=10)
        return resp.header.revision, [(kv.key, kv.value, kv.create_revision, kv.mod_revision,
                                       kv.version, kv.lease) for kv in resp.kvs]

    def revision(self):
        return self.kv.Range(pb.RangeRequest(key=b"any-key"), timeout=10).header.revision

    def assert_status(self, call, request, code, message):
        """Calls call(request) and asserts it fails with exactly (code, message)."""
        with self.assertRaises(grpc.RpcError) as cm:
            call(request, timeout=10)
        self.assertEqual((cm.exception.code(), cm.exception.details()), (code, message))
        return cm.exception

    def assert_rejected_and_unchanged(self, call, request, code, message):
        before = self.state()
        self.assert_status(call, request, code, message)
        self.assertEqual(self.state(), before, "a rejected request changed the store")

    def put(self, key, value=b"v", **kw):
        return self.kv.Put(pb.PutRequest(key=key, value=value, **kw), timeout=10)

    def setUp(self):
        self.p = ("/%s/" % self._testMethodName).encode()   # each test's own keys

    def k(self, name):
        return self.p + name.encode()


class DefaultLimitsTest(BadInputCase):
    """A member started with etcd's default limits."""

    # ---- empty key ---------------------------------------------------------------------

    def test_put_with_empty_key_is_invalid_argument_and_changes_nothing(self):
        self.put(self.k("existing"))
        self.assert_rejected_and_unchanged(self.kv.Put, pb.PutRequest(key=b"", value=b"x"),
                                           INVALID_ARGUMENT, KEY_NOT_PROVIDED)

    def test_undecodable_watch_request_ends_the_stream_with_internal(self):
        # grpc-go ends etcd's Watch stream on a message it cannot unmarshal;
        # etcdq once stopped reading and left the client waiting.
        ch = self.member.channel()
        call = ch.stream_stream("/etcdserverpb.Watch/Watch", request_serializer=None, response_deserializer=None)
        it = call(iter([b"\xff\xff\xff", b"\x0a\x05\x0a\x03abc"]), timeout=10)
        with self.assertRaises(grpc.RpcError) as cm:
            for _ in it:
                pass
        self.assertEqual(cm.exception.code(), grpc.StatusCode.INTERNAL, cm.exception.details())
        self.assertIn("failed to unmarshal", cm.exception.details())

    def test_undecodable_lease_keepalive_request_ends_the_stream_with_internal(self):
        # etcd 3.6 (grpc-go) ends a LeaseKeepAlive stream on a message it
        # cannot unmarshal with INTERNAL "grpc: failed to unmarshal the
        # received message: <gogoproto's reason>"; etcdq once took it for the
        # client's half-close and ended the stream OK.
        ch = self.member.channel()
        call = ch.stream_stream("/etcdserverpb.Lease/LeaseKeepAlive", request_serializer=None,
                                response_deserializer=None)
        rng = random.Random(36)
        garbage = [b"\xff\xff\xff", b"\x08", bytes(rng.getrandbits(8) for _ in range(64))]
        for first in garbage:
            with self.subTest(request=first):
                with self.assertRaises(grpc.RpcError) as cm:
                    for _ in call(iter([first, b"\x08\x01"]), timeout=10):
                        pass
                self.assertEqual(cm.exception.code(), grpc.StatusCode.INTERNAL, cm.exception.details())
                self.assertTrue(cm.exception.details().startswith(
                    "grpc: failed to unmarshal the received message: "), cm.exception.details())
        # A request that decodes is still answered (an unknown lease: TTL 0).
        answers = list(call(iter([b"\x08\x01"]), timeout=10))
        self.assertEqual(len(answers), 1)
        resp = pb.LeaseKeepAliveResponse.FromString(answers[0])
        self.assertEqual((resp.ID, resp.TTL), (1, 0))

    def test_range_with_empty_key_is_invalid_argument(self):
        self.put(self.k("existing"))
        self.assert_rejected_and_unchanged(self.kv.Range, pb.RangeRequest(key=b""),
                                           INVALID_ARGUMENT, KEY_NOT_PROVIDED)
        # An empty key stays invalid even with a range end ("" .. "z" is not "all keys").
        self.assert_rejected_and_unchanged(self.kv.Range, pb.RangeRequest(key=b"", range_end=b"z"),
                                           INVALID_ARGUMENT, KEY_NOT_PROVIDED)

    def test_delete_range_with_empty_key_is_invalid_argument_and_changes_nothing(self):
        self.put(self.k("existing"))
        self.assert_rejected_and_unchanged(self.kv.DeleteRange, pb.DeleteRangeRequest(key=b""),
                                           INVALID_ARGUMENT, KEY_NOT_PROVIDED)
        self.assert_rejected_and_unchanged(self.kv.DeleteRange,
                                           pb.DeleteRangeRequest(key=b"", range_end=b"\0"),
                                           INVALID_ARGUMENT, KEY_NOT_PROVIDED)

    def test_txn_with_empty_key_anywhere_is_invalid_argument_and_changes_nothing(self):
        good = put_op(self.k("would-be-written"))
        cases = {
            "put in success": txn(success=[good, put_op(b"")]),
            "put in failure": txn(failure=[put_op(b"")]),
            "range": txn(success=[good, range_op(b"")]),
            "delete": txn(success=[good, delete_op(b"")]),
            "compare": txn(compare=[version_is_0(b"")], success=[good]),
            "nested put": txn(success=[good, txn_op(success=[put_op(b"")])]),
        }
        for name, request in cases.items():
            with self.subTest(name):
                self.assert_rejected_and_unchanged(self.kv.Txn, request, INVALID_ARGUMENT,
                                                   KEY_NOT_PROVIDED)

    # ---- max-txn-ops at its default -------------------------------------------------------

    def test_txn_with_default_max_txn_ops_128_is_accepted(self):
        rev0 = self.revision()
        resp = self.kv.Txn(txn(success=[put_op(self.k("%03d" % i)) for i in range(DEFAULT_MAX_TXN_OPS)]),
                           timeout=10)
        self.assertTrue(resp.succeeded)
        self.assertEqual(resp.header.revision, rev0 + 1)
        self.assertEqual(len(resp.responses), DEFAULT_MAX_TXN_OPS)

    def test_txn_with_129_ops_is_too_many_operations_and_changes_nothing(self):
        n = DEFAULT_MAX_TXN_OPS + 1
        cases = {
            "success puts": txn(success=[put_op(self.k("%03d" % i)) for i in range(n)]),
            "failure puts": txn(failure=[put_op(self.k("%03d" % i)) for i in range(n)]),
            "compares": txn(compare=[version_is_0(self.k("%03d" % i)) for i in range(n)]),
        }
        for name, request in cases.items():
            with self.subTest(name):
                self.assert_rejected_and_unchanged(self.kv.Txn, request, INVALID_ARGUMENT, TOO_MANY_OPS)

    # ---- max-request-bytes at its default (1.5 MiB) -----------------------------------------

    def test_put_just_under_default_max_request_bytes_is_accepted(self):
        value = b"x" * (DEFAULT_MAX_REQUEST_BYTES - 1024)
        rev0 = self.revision()
        self.assertEqual(self.put(self.k("big"), value).header.revision, rev0 + 1)
        got = self.kv.Range(pb.RangeRequest(key=self.k("big")), timeout=10).kvs[0].value
        self.assertEqual(len(got), len(value))
        self.kv.DeleteRange(pb.DeleteRangeRequest(key=self.k("big")), timeout=10)

    def test_put_just_over_default_max_request_bytes_is_request_too_large(self):
        # The limit applies to the whole encoded request, so a 1.5 MiB value is over it.
        for size in (DEFAULT_MAX_REQUEST_BYTES, DEFAULT_MAX_REQUEST_BYTES + 1):
            with self.subTest(value_bytes=size):
                self.assert_rejected_and_unchanged(self.kv.Put, pb.PutRequest(key=self.k("big"),
                                                                              value=b"x" * size),
                                                   INVALID_ARGUMENT, REQUEST_TOO_LARGE)

    def test_put_over_2_mib_is_refused_by_grpc_with_resource_exhausted(self):
        # etcd lets gRPC accept max-request-bytes + 512 KiB; beyond that gRPC itself refuses.
        # The message is the gRPC library's (Go: "grpc: received message larger than max
        # (N vs. M)", C++: "Received message larger than max (N vs. M)"), so only its core is checked.
        before = self.state()
        size = DEFAULT_MAX_REQUEST_BYTES + GRPC_OVERHEAD_BYTES + 1
        err = self.assert_status_code(self.kv.Put, pb.PutRequest(key=self.k("huge"), value=b"x" * size),
                                      RESOURCE_EXHAUSTED)
        self.assertIn("received message larger than max", err.details().lower())
        self.assertEqual(self.state(), before)

    def assert_status_code(self, call, request, code):
        with self.assertRaises(grpc.RpcError) as cm:
            call(request, timeout=10)
        self.assertEqual(cm.exception.code(), code, cm.exception.details())
        return cm.exception

    # ---- duplicate keys in a txn ----------------------------------------------------------

    def test_txn_writing_one_key_twice_is_duplicate_key_and_changes_nothing(self):
        x = self.k("x")
        self.put(x, b"before")
        lo, hi = self.k("a"), self.k("z")
        cases = {
            "two puts": txn(success=[put_op(x), put_op(x, b"again")]),
            "two puts in failure branch": txn(failure=[put_op(x), put_op(x)]),
            "put then delete": txn(success=[put_op(x), delete_op(x)]),
            "delete then put": txn(success=[delete_op(x), put_op(x)]),
            "put then delete range covering it": txn(success=[put_op(x), delete_op(lo, hi)]),
            "delete range then put inside it": txn(success=[delete_op(lo, hi), put_op(x)]),
            "put and nested put": txn(success=[put_op(x), txn_op(success=[put_op(x)])]),
            "put and nested failure put": txn(success=[put_op(x), txn_op(failure=[put_op(x)])]),
            "two puts inside a nested txn": txn(success=[txn_op(success=[put_op(x), put_op(x)])]),
            "two nested txns putting it": txn(success=[txn_op(success=[put_op(x)]),
                                                       txn_op(success=[put_op(x)])]),
            "nested delete range and outer put": txn(success=[txn_op(success=[delete_op(lo, hi)]),
                                                              put_op(x)]),
            "outer delete range and nested put": txn(success=[delete_op(lo, hi),
                                                              txn_op(success=[put_op(x)])]),
        }
        for name, request in cases.items():
            with self.subTest(name):
                self.assert_rejected_and_unchanged(self.kv.Txn, request, INVALID_ARGUMENT, DUPLICATE_KEY)

    def test_txn_repeating_a_key_without_two_applied_writes_is_accepted(self):
        # etcd only rejects two writes that would both apply if one of them is a put:
        # the two branches never both run, deletes may overlap, and reads never conflict.
        x = self.k("x")
        lo, hi = self.k("a"), self.k("z")
        cases = [
            ("put in success and in failure", txn(success=[put_op(x, b"s")], failure=[put_op(x, b"f")]),
             b"s"),
            ("put then range of it", txn(success=[put_op(x, b"r"), range_op(x)]), b"r"),
            ("two deletes of it", txn(success=[delete_op(x), delete_op(x)]), None),
            ("overlapping delete ranges", txn(success=[delete_op(lo, self.k("y")), delete_op(self.k("b"), hi)]),
             None),
            ("nested put in both of its branches", txn(success=[txn_op(success=[put_op(x, b"n")],
                                                                       failure=[put_op(x, b"m")])]), b"n"),
            ("two nested txns deleting it", txn(success=[txn_op(success=[delete_op(x)]),
                                                         txn_op(success=[delete_op(x)])]), None),
        ]
        for name, request, expected_value in cases:
            with self.subTest(name):
                self.put(x, b"before")
                rev0 = self.revision()
                resp = self.kv.Txn(request, timeout=10)
                self.assertTrue(resp.succeeded)
                got = self.kv.Range(pb.RangeRequest(key=x), timeout=10)
                self.assertEqual([kv.value for kv in got.kvs], [] if expected_value is None else [expected_value])
                self.assertEqual(got.header.revision, rev0 + 1)
                if name == "put then range of it":
                    self.assertEqual([kv.value for kv in resp.responses[1].response_range.kvs], [b"r"])
                if name == "two deletes of it":
                    self.assertEqual([r.response_delete_range.deleted for r in resp.responses], [1, 0])

    # ---- revisions: compacted and future ----------------------------------------------------

    def write_history(self):
        """Puts k three times; returns the three revisions."""
        return [self.put(self.k("h"), v).header.revision for v in (b"1", b"2", b"3")]

    def test_range_at_compacted_revision_is_out_of_range(self):
        r1, r2, r3 = self.write_history()
        self.kv.Compact(pb.CompactionRequest(revision=r2, physical=True), timeout=10)
        for rev in (r1, r1 - 1, 1):
            with self.subTest(revision=rev):
                self.assert_rejected_and_unchanged(self.kv.Range, pb.RangeRequest(key=self.k("h"), revision=rev),
                                                   OUT_OF_RANGE, COMPACTED)
        with self.subTest("range op inside a txn"):
            self.assert_rejected_and_unchanged(
                self.kv.Txn, txn(success=[put_op(self.k("side-effect")), range_op(self.k("h"), revision=r1)]),
                OUT_OF_RANGE, COMPACTED)
        # The compaction revision itself stays readable.
        got = self.kv.Range(pb.RangeRequest(key=self.k("h"), revision=r2), timeout=10)
        self.assertEqual([(kv.value, kv.mod_revision) for kv in got.kvs], [(b"2", r2)])

    def test_range_at_future_revision_is_out_of_range(self):
        self.write_history()
        now = self.revision()
        for rev in (now + 1, now + 1000):
            with self.subTest(revision=rev):
                self.assert_rejected_and_unchanged(self.kv.Range, pb.RangeRequest(key=self.k("h"), revision=rev),
                                                   OUT_OF_RANGE, FUTURE_REV)
        with self.subTest("range op inside a txn fails the whole txn"):
            self.assert_rejected_and_unchanged(
                self.kv.Txn, txn(success=[put_op(self.k("side-effect")), range_op(self.k("h"), revision=now + 1)]),
                OUT_OF_RANGE, FUTURE_REV)
        got = self.kv.Range(pb.RangeRequest(key=self.k("h"), revision=now), timeout=10)
        self.assertEqual([kv.value for kv in got.kvs], [b"3"])

    def test_compaction_at_future_revision_is_out_of_range_and_compacts_nothing(self):
        r1, _, _ = self.write_history()
        now = self.revision()
        self.assert_rejected_and_unchanged(self.kv.Compact, pb.CompactionRequest(revision=now + 1),
                                           OUT_OF_RANGE, FUTURE_REV)
        self.assert_rejected_and_unchanged(self.kv.Compact, pb.CompactionRequest(revision=now + 1000,
                                                                                   physical=True),
                                           OUT_OF_RANGE, FUTURE_REV)
        got = self.kv.Range(pb.RangeRequest(key=self.k("h"), revision=r1), timeout=10)
        self.assertEqual([kv.value for kv in got.kvs], [b"1"], "history was compacted")

    def test_compaction_at_or_below_compacted_revision_is_out_of_range(self):
        r1, r2, r3 = self.write_history()
        resp = self.kv.Compact(pb.CompactionRequest(revision=r2, physical=True), timeout=10)
        self.assertEqual(resp.header.revision, r3, "a compaction does not advance the revision")
        for rev in (r2, r1, 1, 0, -1):
            with self.subTest(revision=rev):
                self.assert_rejected_and_unchanged(self.kv.Compact, pb.CompactionRequest(revision=rev),
                                                   OUT_OF_RANGE, COMPACTED)
        got = self.kv.Range(pb.RangeRequest(key=self.k("h"), revision=r2), timeout=10)
        self.assertEqual([kv.value for kv in got.kvs], [b"2"])

    def test_compaction_at_current_revision_keeps_latest_readable(self):
        self.write_history()
        now = self.revision()
        self.kv.Compact(pb.CompactionRequest(revision=now, physical=True), timeout=10)
        got = self.kv.Range(pb.RangeRequest(key=self.k("h"), revision=now), timeout=10)
        self.assertEqual([kv.value for kv in got.kvs], [b"3"])
        self.assert_status(self.kv.Range, pb.RangeRequest(key=self.k("h"), revision=now - 1),
                           OUT_OF_RANGE, COMPACTED)

    def test_negative_range_revision_reads_latest(self):
        self.write_history()
        got = self.kv.Range(pb.RangeRequest(key=self.k("h"), revision=-1), timeout=10)
        self.assertEqual([kv.value for kv in got.kvs], [b"3"])

    # ---- range_end below key ----------------------------------------------------------------

    def test_range_with_range_end_below_key_is_empty_not_an_error(self):
        for k in ("a", "b", "c"):
            self.put(self.k(k))
        before = self.state()
        for end in (self.k("a"), self.k("b")):         # below the key, and equal to it
            with self.subTest(range_end=end):
                resp = self.kv.Range(pb.RangeRequest(key=self.k("b"), range_end=end), timeout=10)
                self.assertEqual((len(resp.kvs), resp.count, resp.more), (0, 0, False))
                self.assertEqual(resp.header.revision, before[0])
        self.assertEqual(self.state(), before)

    def test_delete_range_with_range_end_below_key_deletes_nothing_and_keeps_revision(self):
        for k in ("a", "b", "c"):
            self.put(self.k(k))
        before = self.state()
        resp = self.kv.DeleteRange(pb.DeleteRangeRequest(key=self.k("c"), range_end=self.k("a")), timeout=10)
        self.assertEqual((resp.deleted, resp.header.revision), (0, before[0]))
        self.assertEqual(self.state(), before)

    # ---- leases and ignore_value / ignore_lease ---------------------------------------------

    def test_put_with_missing_lease_is_not_found_and_changes_nothing(self):
        self.put(self.k("existing"))
        self.assert_rejected_and_unchanged(self.kv.Put, pb.PutRequest(key=self.k("a"), value=b"x", lease=0x1234abcd),
                                           NOT_FOUND, LEASE_NOT_FOUND)
        self.assert_rejected_and_unchanged(self.kv.Put, pb.PutRequest(key=self.k("existing"), value=b"x",
                                                                      lease=0x1234abcd),
                                           NOT_FOUND, LEASE_NOT_FOUND)
        with self.subTest("inside a txn, after a good put"):
            self.assert_rejected_and_unchanged(
                self.kv.Txn, txn(success=[put_op(self.k("b")), put_op(self.k("a"), lease=0x1234abcd)]),
                NOT_FOUND, LEASE_NOT_FOUND)

    def test_ignore_value_or_ignore_lease_on_missing_key_is_key_not_found(self):
        self.put(self.k("existing"))
        for flag in ("ignore_value", "ignore_lease"):
            with self.subTest(flag):
                self.assert_rejected_and_unchanged(self.kv.Put, pb.PutRequest(key=self.k("missing"), **{flag: True}),
                                                   INVALID_ARGUMENT, KEY_NOT_FOUND)
            with self.subTest(flag + " inside a txn, after a good put"):
                self.assert_rejected_and_unchanged(
                    self.kv.Txn, txn(success=[put_op(self.k("b")), put_op(self.k("missing"), b"", **{flag: True})]),
                    INVALID_ARGUMENT, KEY_NOT_FOUND)

    def test_ignore_value_with_a_value_or_ignore_lease_with_a_lease_is_invalid_argument(self):
        self.put(self.k("existing"))
        self.assert_rejected_and_unchanged(
            self.kv.Put, pb.PutRequest(key=self.k("existing"), value=b"new", ignore_value=True),
            INVALID_ARGUMENT, VALUE_PROVIDED)
        self.assert_rejected_and_unchanged(
            self.kv.Put, pb.PutRequest(key=self.k("existing"), lease=5, ignore_lease=True),
            INVALID_ARGUMENT, LEASE_PROVIDED)

    def test_ignore_value_on_existing_key_keeps_value_and_advances_revision(self):
        self.put(self.k("existing"), b"kept")
        rev0 = self.revision()
        self.assertEqual(self.kv.Put(pb.PutRequest(key=self.k("existing"), ignore_value=True),
                                     timeout=10).header.revision, rev0 + 1)
        kv = self.kv.Range(pb.RangeRequest(key=self.k("existing")), timeout=10).kvs[0]
        self.assertEqual((kv.value, kv.mod_revision, kv.version), (b"kept", rev0 + 1, 2))

    def test_bad_op_in_txn_branch_not_taken_is_ignored(self):
        # etcd checks leases and ignore_* only on the branch that runs.
        rev0 = self.revision()
        resp = self.kv.Txn(txn(success=[put_op(self.k("ok"))],
                               failure=[put_op(self.k("missing"), b"", ignore_value=True),
                                        put_op(self.k("leased"), lease=0x1234abcd)]), timeout=10)
        self.assertTrue(resp.succeeded)
        self.assertEqual(resp.header.revision, rev0 + 1)


class NegativeTxnRangeRevisionTest(BadInputCase):
    """A fresh member of its own: what a negative revision does depends on
    whether the store was ever compacted."""

    def txn_putting_and_reading_at(self, revision):
        return txn(success=[put_op(self.k("side-effect")), range_op(self.k("h"), revision=revision)])

    def test_negative_range_revision_in_txn_is_compacted_as_in_etcd(self):
        # etcd's checkRequestRange compares every revision but 0 with the compaction
        # watermark, which is -1 until the first compaction: a range op at -2 or below
        # fails the whole txn as compacted, -1 reads the latest until a compaction,
        # then fails too. A plain Range at any revision <= 0 reads the latest.
        for v in (b"1", b"2", b"3"):
            self.put(self.k("h"), v)
        for rev in (-2, -100):
            with self.subTest("never compacted", revision=rev):
                self.assert_rejected_and_unchanged(self.kv.Txn, self.txn_putting_and_reading_at(rev),
                                                   OUT_OF_RANGE, COMPACTED)
                self.assert_rejected_and_unchanged(self.kv.Txn, txn(success=[range_op(self.k("h"), revision=rev)]),
                                                   OUT_OF_RANGE, COMPACTED)
        resp = self.kv.Txn(self.txn_putting_and_reading_at(-1), timeout=10)
        self.assertEqual([kv.value for kv in resp.responses[1].response_range.kvs], [b"3"])
        now = self.revision()
        self.kv.Compact(pb.CompactionRequest(revision=now, physical=True), timeout=10)
        for rev in (-1, -2):
            with self.subTest("compacted", revision=rev):
                self.assert_rejected_and_unchanged(self.kv.Txn, self.txn_putting_and_reading_at(rev),
                                                   OUT_OF_RANGE, COMPACTED)
        with self.subTest("only the branch that runs is checked"):
            resp = self.kv.Txn(txn(failure=[range_op(self.k("h"), revision=-1)]), timeout=10)
            self.assertTrue(resp.succeeded)
        for rev in (-1, -100):
            with self.subTest("plain range reads the latest", revision=rev):
                got = self.kv.Range(pb.RangeRequest(key=self.k("h"), revision=rev), timeout=10)
                self.assertEqual([kv.value for kv in got.kvs], [b"3"])


class MemberAddPeerUrlTest(BadInputCase):
    """MemberAdd's peer URLs, checked as etcd's types.NewURLs checks them (Go's
    url.Parse, then host:port and no path). Members are added as learners, so
    the one-member cluster keeps its quorum, and removed again."""

    INVALID_URLS = [
        "http://a b:1", "http://[::1", "127.0.0.1:1", "//h:1", "http:h:1", "http:/h:1", "",
        "http://", "http://h", "http://h:port", "http://h:-1",
        "http://h:1:2", "http://[::1]", "http://[::1]x:1", "http://a]b:1", "http://h?:1",
        "http://h:1/", "http://h:1/path", "http://%41:1", "http://a%20b:1", "http://a^b:1",
        "http://\x7f:1", "http://h:1#%zz", "http://a b@h:1", "ftp://h:1",
    ]
    # Odd but valid for etcd: an empty host, an empty or large port, white space
    # around, an upper-case scheme, userinfo, query and fragment, IPv6 with a zone.
    VALID_URLS = [
        "http://:1", "http://h:", "http://h:99999", " http://h:1 ", "HTTP://h:2", "http://u:p@h:3?q#f",
        "http://[::1]:4", "http://[fe80::1%25en0]:5", "http://a_b~c!:6", "http://h%c3%a9:7",
    ]
    # etcd 3.6 takes unix and unixs URLs of any form (3.4 wanted host:port of
    # them too); etcdq reaches its peers over TCP only and refuses them
    # (server/peer_urls.h): a difference kept on purpose.
    UNIX_URLS = ["unix://x", "unix:///tmp/x", "unixs://y"]

    def member_add(self, urls):
        # isLearner (field 2) is newer than python-etcd3's rpc_pb2: append it by hand.
        call = self.member.channel().unary_unary(
            "/etcdserverpb.Cluster/MemberAdd",
            request_serializer=lambda r: r.SerializeToString() + b"\x10\x01",
            response_deserializer=pb.MemberAddResponse.FromString)
        return call(pb.MemberAddRequest(peerURLs=urls), timeout=10)

    def test_member_add_with_malformed_peer_url_is_invalid_argument(self):
        for url in self.INVALID_URLS + ([] if harness.is_reference_etcd() else self.UNIX_URLS):
            with self.subTest(url=url):
                with self.assertRaises(grpc.RpcError) as cm:
                    self.member_add([url])
                self.assertEqual((cm.exception.code(), cm.exception.details()),
                                 (INVALID_ARGUMENT, "etcdserver: given member URLs are invalid"))
        with self.subTest("one bad URL among good ones"):
            with self.assertRaises(grpc.RpcError) as cm:
                self.member_add(["http://h:1", "http://a b:1"])
            self.assertEqual(cm.exception.code(), INVALID_ARGUMENT)
        with self.subTest("no URL"):
            with self.assertRaises(grpc.RpcError) as cm:
                self.member_add([])
            self.assertEqual(cm.exception.code(), INVALID_ARGUMENT)

    def test_member_add_with_odd_but_valid_peer_url_adds_the_learner(self):
        cluster = harness.rpc_pb2_grpc.ClusterStub(self.member.channel())
        # One at a time: etcd 3.6 allows one learner (--max-learners).
        for url in self.VALID_URLS + (self.UNIX_URLS if harness.is_reference_etcd() else []):
            with self.subTest(url=url):
                resp = self.member_add([url])
                self.assertTrue(resp.member.ID)
                cluster.MemberRemove(pb.MemberRemoveRequest(ID=resp.member.ID), timeout=10)


class UndecodableRequestTest(BadInputCase):
    """Bytes that are not the method's message, sent raw: etcd (grpc-go) answers
    INTERNAL "grpc: error unmarshalling request: <gogoproto's reason>". The
    reason's words cannot always be gogoproto's; the form and code are."""

    UNMARSHAL = "grpc: error unmarshalling request: "
    METHODS = ["/etcdserverpb.KV/Range", "/etcdserverpb.KV/Put", "/etcdserverpb.KV/DeleteRange",
               "/etcdserverpb.KV/Txn", "/etcdserverpb.KV/Compact", "/etcdserverpb.Lease/LeaseGrant",
               "/etcdserverpb.Lease/LeaseRevoke", "/etcdserverpb.Lease/LeaseTimeToLive",
               "/etcdserverpb.Cluster/MemberAdd", "/etcdserverpb.Cluster/MemberList",
               "/etcdserverpb.Maintenance/Status", "/etcdserverpb.Maintenance/Alarm",
               "/v3lockpb.Lock/Lock", "/v3lockpb.Lock/Unlock", "/v3electionpb.Election/Campaign",
               "/v3electionpb.Election/Leader"]
    # (MemberListRequest's field 1 is etcd 3.6's bool `linearizable`: "proto:
    # wrong wireType = 2 for field Linearizable" there.)
    FIELD_1_NOT_BYTES = {"/etcdserverpb.KV/Compact", "/etcdserverpb.Lease/LeaseGrant",
                         "/etcdserverpb.Lease/LeaseRevoke", "/etcdserverpb.Lease/LeaseTimeToLive",
                         "/etcdserverpb.Maintenance/Alarm", "/etcdserverpb.Cluster/MemberList"}

    def test_undecodable_request_is_internal_unmarshal_error_and_changes_nothing(self):
        channel = self.member.channel()
        before = self.state()
        for method in self.METHODS:
            call = channel.unary_unary(method)
            # Field 1 as bytes, cut short: where field 1 is bytes (or unknown) every
            # parser calls it the end of the data; gogoproto names the field otherwise.
            if method not in self.FIELD_1_NOT_BYTES:
                with self.subTest(method=method, request="cut short"):
                    self.assert_status(call, b"\x0a\x05ab", grpc.StatusCode.INTERNAL,
                                       self.UNMARSHAL + "unexpected EOF")
            for garbage in (b"\xff\xff\xff", b"\x0f", b"\x0a\xff\xff\xff\xff\x0f"):
                with self.subTest(method=method, request=garbage):
                    with self.assertRaises(grpc.RpcError) as cm:
                        call(garbage, timeout=10)
                    self.assertEqual(cm.exception.code(), grpc.StatusCode.INTERNAL)
                    self.assertTrue(cm.exception.details().startswith(self.UNMARSHAL), cm.exception.details())
        self.assertEqual(self.state(), before)
        # The connection and the member stay usable.
        self.assertEqual(self.put(self.k("after"), b"ok").header.revision, before[0] + 1)


class SmallLimitsTest(BadInputCase):
    """A member started with --max-txn-ops 8 --max-request-bytes 10000."""

    MAX_OPS = 8
    MAX_BYTES = 10000
    member_args = ("--max-txn-ops", str(MAX_OPS), "--max-request-bytes", str(MAX_BYTES))

    def puts(self, n, tag="k"):
        return [put_op(self.k("%s%02d" % (tag, i))) for i in range(n)]

    def test_txn_with_exactly_max_txn_ops_in_each_list_is_accepted(self):
        rev0 = self.revision()
        resp = self.kv.Txn(txn(compare=[version_is_0(self.k("c%d" % i)) for i in range(self.MAX_OPS)],
                               success=self.puts(self.MAX_OPS), failure=self.puts(self.MAX_OPS, "f")), timeout=10)
        self.assertTrue(resp.succeeded)
        self.assertEqual(resp.header.revision, rev0 + 1)

    def test_txn_with_one_op_over_max_txn_ops_is_too_many_operations_and_changes_nothing(self):
        n = self.MAX_OPS + 1
        cases = {
            "success puts": txn(success=self.puts(n)),
            "failure puts": txn(failure=self.puts(n)),
            "compares": txn(compare=[version_is_0(self.k("c%d" % i)) for i in range(n)]),
            "ranges count too": txn(success=[range_op(self.k("r%d" % i)) for i in range(n)]),
            "too many ops wins over a duplicate key": txn(success=[put_op(self.k("same"))] * n),
            "too many ops wins over an empty key": txn(success=self.puts(self.MAX_OPS) + [put_op(b"")]),
        }
        for name, request in cases.items():
            with self.subTest(name):
                self.assert_rejected_and_unchanged(self.kv.Txn, request, INVALID_ARGUMENT, TOO_MANY_OPS)

    def test_nested_txn_shares_the_ops_budget_with_its_parent(self):
        # etcd gives a nested txn max-txn-ops minus the largest of its parent's compare,
        # success and failure lists.
        outer_4_inner_4 = txn(success=[txn_op(success=self.puts(4, "n"))] + self.puts(3, "o"))
        compares_4_inner_4 = txn(compare=[version_is_0(self.k("c%d" % i)) for i in range(4)],
                                 success=[txn_op(success=self.puts(4, "q"))])
        outer_1_inner_7 = txn(success=[txn_op(success=self.puts(7, "s"))])
        for name, request in (("4 + 4", outer_4_inner_4), ("4 compares + 4", compares_4_inner_4),
                              ("1 + 7", outer_1_inner_7)):
            with self.subTest("accepted: " + name):
                self.assertTrue(self.kv.Txn(request, timeout=10).succeeded)
        cases = {
            "4 + 5": txn(success=[txn_op(success=self.puts(5, "n"))] + self.puts(3, "o")),
            "1 + 8": txn(success=[txn_op(success=self.puts(8, "s"))]),
            "8 + 8": txn(success=[txn_op(success=self.puts(8, "n"))] + self.puts(7, "o")),
            "1 + 1 + 7": txn(success=[txn_op(success=[txn_op(success=self.puts(7, "d"))])]),
        }
        for name, request in cases.items():
            with self.subTest("rejected: " + name):
                self.assert_rejected_and_unchanged(self.kv.Txn, request, INVALID_ARGUMENT, TOO_MANY_OPS)

    def test_put_under_max_request_bytes_is_accepted(self):
        rev0 = self.revision()
        self.assertEqual(self.put(self.k("v"), b"x" * (self.MAX_BYTES - 200)).header.revision, rev0 + 1)

    def test_put_over_max_request_bytes_is_request_too_large_and_changes_nothing(self):
        for size in (self.MAX_BYTES, 2 * self.MAX_BYTES, self.MAX_BYTES + GRPC_OVERHEAD_BYTES - 1024):
            with self.subTest(value_bytes=size):
                self.assert_rejected_and_unchanged(self.kv.Put, pb.PutRequest(key=self.k("v"), value=b"x" * size),
                                                   INVALID_ARGUMENT, REQUEST_TOO_LARGE)
        with self.subTest("txn"):
            self.assert_rejected_and_unchanged(self.kv.Txn, txn(success=[put_op(self.k("v"), b"y" * 2 * self.MAX_BYTES)]),
                                               INVALID_ARGUMENT, REQUEST_TOO_LARGE)
        with self.subTest("txn of small puts adding up"):
            self.assert_rejected_and_unchanged(
                self.kv.Txn, txn(success=[put_op(self.k("s%d" % i), b"z" * 2000) for i in range(self.MAX_OPS)]),
                INVALID_ARGUMENT, REQUEST_TOO_LARGE)

    def test_request_over_max_request_bytes_plus_512_kib_is_resource_exhausted(self):
        before = self.state()
        size = self.MAX_BYTES + GRPC_OVERHEAD_BYTES + 1024
        with self.assertRaises(grpc.RpcError) as cm:
            self.put(self.k("v"), b"x" * size)
        self.assertEqual(cm.exception.code(), RESOURCE_EXHAUSTED, cm.exception.details())
        self.assertIn("received message larger than max", cm.exception.details().lower())
        self.assertEqual(self.state(), before)
        # The connection stays usable.
        self.assertEqual(self.put(self.k("after"), b"ok").header.revision, before[0] + 1)

    def test_range_with_key_over_max_request_bytes_is_served(self):
        # Only writes (which go through consensus) are held to --max-request-bytes.
        resp = self.kv.Range(pb.RangeRequest(key=b"k" * (2 * self.MAX_BYTES)), timeout=10)
        self.assertEqual((len(resp.kvs), resp.count), (0, 0))


if __name__ == "__main__":
    harness.main()
