#!/usr/bin/python3
"""Txn shapes at the edges: deep nesting within --max-txn-ops, and empty ops."""
import grpc

import harness
from etcd3.etcdrpc import rpc_pb2


def nested(depth, key):
    t = rpc_pb2.TxnRequest(success=[rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=key, value=b"1"))])
    for _ in range(depth):
        t = rpc_pb2.TxnRequest(success=[rpc_pb2.RequestOp(request_txn=t)])
    return t


def nested_bytes(depth, key):
    """nested(depth, key), serialized without python protobuf, which refuses
    messages nested deeper than 100 (a txn level is two messages)."""
    def field(number, payload):
        n, varint = len(payload), b""
        while True:
            low, n = n & 0x7F, n >> 7
            varint += bytes([low | 0x80 if n else low])
            if not n:
                return bytes([number << 3 | 2]) + varint + payload
    t = nested(0, key).SerializeToString()
    for _ in range(depth):
        t = field(2, field(4, t))   # TxnRequest.success = [RequestOp{request_txn: t}]
    return t


class TxnNesting(harness.MemberTestCase):
    @classmethod
    def setUpClass(cls):
        cls.m = cls.new_class_member()
        cls.kv = cls.m.kv()

    def test_txn_nested_48_deep_applies_its_innermost_put(self):
        r = self.kv.Txn(nested(48, b"deep"), timeout=5)
        self.assertTrue(r.succeeded)
        got = self.kv.Range(rpc_pb2.RangeRequest(key=b"deep"), timeout=5)
        self.assertEqual(got.kvs[0].value, b"1")
        self.assertEqual(got.kvs[0].mod_revision, r.header.revision)

    def raw_txn(self, depth, key):
        """Sends nested(depth, key); returns the revision it was applied at."""
        call = self.m.channel().unary_unary("/etcdserverpb.KV/Txn")
        call(nested_bytes(depth, key), timeout=30)   # the answer nests too deep for python protobuf too
        got = self.kv.Range(rpc_pb2.RangeRequest(key=key), timeout=5)
        self.assertEqual([kv.value for kv in got.kvs], [b"1"])
        return got.kvs[0].mod_revision

    def test_txn_nested_up_to_max_txn_ops_minus_one_applies(self):
        # Each level takes one op of the 128 its parent leaves (etcd's default
        # --max-txn-ops), so 127 levels above a put fit. gRPC C++ alone parses
        # only 100 nested messages, about 50 levels.
        for depth in (51, 100, 127):
            with self.subTest(depth=depth):
                before = self.kv.Range(rpc_pb2.RangeRequest(key=b"x"), timeout=5).header.revision
                self.assertEqual(self.raw_txn(depth, b"deep%d" % depth), before + 1)

    def test_txn_nested_past_max_txn_ops_is_too_many_operations_and_changes_nothing(self):
        # 128 is just over the budget; 5000 is far past any parse limit, and a
        # 20000 deep request is 150 KB: all get etcd's answer, none crashes the member.
        call = self.m.channel().unary_unary("/etcdserverpb.KV/Txn")
        before = self.kv.Range(rpc_pb2.RangeRequest(key=b"x"), timeout=5).header.revision
        for depth in (128, 200, 5000, 20000):
            with self.subTest(depth=depth):
                with self.assertRaises(grpc.RpcError) as cm:
                    call(nested_bytes(depth, b"toodeep"), timeout=30)
                self.assertEqual((cm.exception.code(), cm.exception.details()),
                                 (grpc.StatusCode.INVALID_ARGUMENT, "etcdserver: too many operations in txn request"))
        self.assertEqual(self.kv.Range(rpc_pb2.RangeRequest(key=b"x"), timeout=5).header.revision, before)

    def test_txn_with_an_empty_op_is_key_not_found_and_changes_nothing(self):
        before = self.kv.Range(rpc_pb2.RangeRequest(key=b"x"), timeout=5).header.revision
        for t in (rpc_pb2.TxnRequest(success=[rpc_pb2.RequestOp()]),
                  rpc_pb2.TxnRequest(failure=[rpc_pb2.RequestOp()]),
                  nested(2, b"a").__class__(success=[rpc_pb2.RequestOp(request_txn=rpc_pb2.TxnRequest(
                      success=[rpc_pb2.RequestOp()]))])):
            with self.assertRaises(grpc.RpcError) as cm:
                self.kv.Txn(t, timeout=5)
            self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertEqual(cm.exception.details(), "etcdserver: key not found")
        self.assertEqual(self.kv.Range(rpc_pb2.RangeRequest(key=b"x"), timeout=5).header.revision, before)


class TxnNestingLargeBudget(harness.MemberTestCase):
    """--max-txn-ops 3000: nesting is bounded by the budget etcd gives."""

    @classmethod
    def setUpClass(cls):
        cls.m = cls.new_class_member(extra_args=["--max-txn-ops", "3000"])
        cls.kv = cls.m.kv()

    def test_txn_nested_1000_deep_applies_and_survives_a_restart(self):
        call = self.m.channel().unary_unary("/etcdserverpb.KV/Txn")
        call(nested_bytes(1000, b"deep1000"), timeout=30)
        self.m.restart()   # the command is read back from the log / store at that depth
        got = self.m.kv().Range(rpc_pb2.RangeRequest(key=b"deep1000"), timeout=10)
        self.assertEqual([kv.value for kv in got.kvs], [b"1"])


if __name__ == "__main__":
    harness.main()
