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


if __name__ == "__main__":
    harness.main()
