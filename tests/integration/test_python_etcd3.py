#!/usr/bin/python3
"""python-etcd3 (Debian's python3-etcd3 0.12) against the member under test.

Every expectation was first checked against Debian's etcd 3.4: revisions are
exact, either absolute on a fresh store (which starts at revision 1) or relative
to the revision a test starts from on a member no other test writes to at the
same time.

    /usr/bin/python3 tests/integration/test_python_etcd3.py [-k pattern]
    ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/integration/test_python_etcd3.py
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402
from etcd3.etcdrpc import rpc_pb2  # noqa: E402


def values(pairs):
    return [v for v, _ in pairs]


def keys(pairs):
    return [m.key for _, m in pairs]


class FreshStoreRevisionTest(harness.MemberTestCase):
    """Absolute revisions, each test on its own empty member."""

    def setUp(self):
        self.member = self.new_member()
        self.etcd = self.member.client()

    def revision(self):
        return self.etcd.get_response("any-key").header.revision

    def test_fresh_store_is_at_revision_1_and_first_put_is_revision_2(self):
        self.assertEqual(self.revision(), 1)
        resp = self.etcd.put("a", "1")
        self.assertEqual(resp.header.revision, 2)
        value, meta = self.etcd.get("a")
        self.assertEqual(value, b"1")
        self.assertEqual((meta.create_revision, meta.mod_revision, meta.version, meta.lease_id),
                         (2, 2, 1, 0))
        self.assertEqual(meta.response_header.revision, 2)

    def test_overwrites_bump_mod_revision_and_version_and_keep_create_revision(self):
        for i, v in enumerate(["1", "2", "3"]):
            self.assertEqual(self.etcd.put("a", v).header.revision, 2 + i)
        value, meta = self.etcd.get("a")
        self.assertEqual(value, b"3")
        self.assertEqual((meta.create_revision, meta.mod_revision, meta.version), (2, 4, 3))

    def test_put_of_the_same_value_still_advances_revision(self):
        self.etcd.put("a", "same")
        self.assertEqual(self.etcd.put("a", "same").header.revision, 3)
        _, meta = self.etcd.get("a")
        self.assertEqual((meta.create_revision, meta.mod_revision, meta.version), (2, 3, 2))

    def test_delete_then_put_recreates_key_with_version_1(self):
        self.etcd.put("a", "1")                                    # rev 2
        resp = self.etcd.delete("a", return_response=True)        # rev 3
        self.assertEqual((resp.deleted, resp.header.revision), (1, 3))
        self.assertEqual(self.etcd.get("a"), (None, None))
        self.assertEqual(self.etcd.put("a", "2").header.revision, 4)
        _, meta = self.etcd.get("a")
        self.assertEqual((meta.create_revision, meta.mod_revision, meta.version), (4, 4, 1))

    def test_txn_writing_several_keys_uses_one_revision(self):
        t = self.etcd.transactions
        ok, _ = self.etcd.transaction(compare=[], success=[t.put("a", "1"), t.put("b", "2"),
                                                           t.put("c", "3")], failure=[])
        self.assertTrue(ok)
        self.assertEqual(self.revision(), 2)
        metas = [m for _, m in self.etcd.get_range("a", "d")]
        self.assertEqual([(m.key, m.create_revision, m.mod_revision, m.version) for m in metas],
                         [(b"a", 2, 2, 1), (b"b", 2, 2, 1), (b"c", 2, 2, 1)])

    def test_reads_and_no_op_writes_do_not_advance_revision(self):
        self.etcd.put("a", "1")                                                    # rev 2
        t = self.etcd.transactions
        self.etcd.get("a")
        list(self.etcd.get_prefix("a"))
        list(self.etcd.get_range("a", "z"))
        self.assertFalse(self.etcd.delete("missing"))                              # nothing deleted
        self.assertEqual(self.etcd.delete_prefix("missing/").deleted, 0)
        ok, _ = self.etcd.transaction(compare=[t.value("a") == "other"], success=[t.put("a", "x")],
                                      failure=[])                                  # empty branch taken
        self.assertFalse(ok)
        ok, resp = self.etcd.transaction(compare=[t.value("a") == "1"], success=[t.get("a")],
                                         failure=[])                               # read-only txn
        self.assertTrue(ok)
        ok, resp = self.etcd.transaction(compare=[], success=[t.delete("missing")], failure=[])
        self.assertEqual(resp[0].response_delete_range.deleted, 0)
        self.assertEqual(self.revision(), 2)
        self.assertEqual(self.etcd.put("b", "1").header.revision, 3)

    def test_delete_prefix_of_several_keys_uses_one_revision(self):
        for k in ("p/a", "p/b", "p/c", "q"):
            self.etcd.put(k, "v")                                                  # revs 2..5
        resp = self.etcd.delete_prefix("p/")
        self.assertEqual((resp.deleted, resp.header.revision), (3, 6))
        self.assertEqual(keys(self.etcd.get_all()), [b"q"])


class KVTest(harness.MemberTestCase):
    """One member for the class; each test writes under its own prefix."""

    @classmethod
    def setUpClass(cls):
        cls.member = cls.new_class_member()
        cls.etcd = cls.member.client()

    def setUp(self):
        self.p = "/%s/" % self._testMethodName
        self.t = self.etcd.transactions

    def k(self, name):
        return self.p + name

    def revision(self):
        return self.etcd.get_response("any-key").header.revision

    # ---- put / get ----------------------------------------------------------------------

    def test_put_then_get_returns_value_and_metadata(self):
        rev0 = self.revision()
        resp = self.etcd.put(self.k("a"), b"\x00binary\xffvalue")
        self.assertEqual(resp.header.revision, rev0 + 1)
        self.assertFalse(resp.HasField("prev_kv"))
        value, meta = self.etcd.get(self.k("a"))
        self.assertEqual(value, b"\x00binary\xffvalue")
        self.assertEqual(meta.key, self.k("a").encode())
        self.assertEqual((meta.create_revision, meta.mod_revision, meta.version), (rev0 + 1,) * 2 + (1,))

    def test_get_of_missing_key_returns_none_and_current_revision(self):
        rev0 = self.revision()
        self.assertEqual(self.etcd.get(self.k("missing")), (None, None))
        resp = self.etcd.get_response(self.k("missing"))
        self.assertEqual((resp.count, len(resp.kvs), resp.more), (0, 0, False))
        self.assertEqual(resp.header.revision, rev0)

    def test_put_with_prev_kv_returns_previous_pair(self):
        self.etcd.put(self.k("a"), "old")
        _, before = self.etcd.get(self.k("a"))
        resp = self.etcd.put(self.k("a"), "new", prev_kv=True)
        self.assertEqual(resp.prev_kv.value, b"old")
        self.assertEqual(resp.prev_kv.mod_revision, before.mod_revision)
        self.assertEqual(resp.prev_kv.version, 1)
        self.assertFalse(self.etcd.put(self.k("b"), "x", prev_kv=True).HasField("prev_kv"))

    def test_empty_value_is_stored_and_distinct_from_missing(self):
        self.etcd.put(self.k("empty"), b"")
        value, meta = self.etcd.get(self.k("empty"))
        self.assertEqual(value, b"")
        self.assertEqual(meta.version, 1)

    # ---- ranges ----------------------------------------------------------------------------

    def test_get_prefix_returns_only_keys_under_prefix_in_key_order(self):
        for k in ("b", "a", "c/1", "c", "a0"):
            self.etcd.put(self.k(k), "v-" + k)
        self.etcd.put(self.p[:-1], "the prefix without slash")      # sorts before the prefix
        self.etcd.put(self.p[:-1] + "0", "just after the prefix")   # '0' follows '/'
        got = list(self.etcd.get_prefix(self.p))
        self.assertEqual(keys(got), [self.k(x).encode() for x in ("a", "a0", "b", "c", "c/1")])
        self.assertEqual(values(got), [b"v-a", b"v-a0", b"v-b", b"v-c", b"v-c/1"])
        self.assertEqual(list(self.etcd.get_prefix(self.k("zz"))), [])

    def test_get_range_is_half_open(self):
        for k in "abcde":
            self.etcd.put(self.k(k), k)
        self.assertEqual(values(self.etcd.get_range(self.k("b"), self.k("d"))), [b"b", b"c"])
        self.assertEqual(values(self.etcd.get_range(self.k("b"), self.k("b"))), [])
        self.assertEqual(values(self.etcd.get_range(self.k("a"), self.k("a\0"))), [b"a"])

    def test_get_prefix_with_keys_only_returns_keys_without_values(self):
        for k in "abc":
            self.etcd.put(self.k(k), "value")
        got = list(self.etcd.get_prefix(self.p, keys_only=True))
        self.assertEqual(keys(got), [self.k(x).encode() for x in "abc"])
        self.assertEqual(values(got), [b"", b"", b""])
        self.assertEqual([m.version for _, m in got], [1, 1, 1])

    # python-etcd3 0.12 accepts limit= and count_only= but never puts them in the
    # RangeRequest, so these go through its kvstub with a request built here.

    def prefix_range(self, **kw):
        end = self.p[:-1] + chr(ord(self.p[-1]) + 1)
        return self.etcd.kvstub.Range(rpc_pb2.RangeRequest(key=self.p.encode(), range_end=end.encode(), **kw),
                                      timeout=10)

    def test_count_only_range_counts_without_returning_kvs(self):
        for k in "abc":
            self.etcd.put(self.k(k), "value")
        resp = self.prefix_range(count_only=True)
        self.assertEqual((resp.count, len(resp.kvs), resp.more), (3, 0, False))

    def test_range_with_limit_reports_more_and_full_count(self):
        for k in "abcde":
            self.etcd.put(self.k(k), k)
        resp = self.prefix_range(limit=2)
        self.assertEqual([kv.value for kv in resp.kvs], [b"a", b"b"])
        self.assertEqual((resp.count, resp.more), (5, True))
        resp = self.prefix_range(limit=5)
        self.assertEqual((resp.count, resp.more, len(resp.kvs)), (5, False, 5))

    def test_descending_sort_with_limit_returns_the_last_keys(self):
        for k in "abcde":
            self.etcd.put(self.k(k), k)
        resp = self.prefix_range(sort_order=rpc_pb2.RangeRequest.DESCEND, limit=2)
        self.assertEqual([kv.value for kv in resp.kvs], [b"e", b"d"])
        self.assertEqual((resp.count, resp.more), (5, True))

    def test_get_prefix_sorts_by_each_target_and_order(self):
        # Written in this order: key c (v1), a (v1), b (v1), a (v2), c (v2), c (v3).
        # So: create order c<a<b, mod order b<a<c, version a=2 b=1 c=3, values chosen unsorted.
        for k, v in (("c", "3"), ("a", "9"), ("b", "5"), ("a", "7"), ("c", "1"), ("c", "2")):
            self.etcd.put(self.k(k), v)
        cases = [
            ("key", "ascend", "abc"), ("key", "descend", "cba"),
            ("create", "ascend", "cab"), ("create", "descend", "bac"),
            ("mod", "ascend", "bac"), ("mod", "descend", "cab"),
            ("version", "ascend", "bac"), ("version", "descend", "cab"),
            ("value", "ascend", "cba"), ("value", "descend", "abc"),   # values c=2 b=5 a=7
        ]
        for target, order, expected in cases:
            with self.subTest(target=target, order=order):
                got = self.etcd.get_prefix(self.p, sort_target=target, sort_order=order)
                self.assertEqual(keys(got), [self.k(x).encode() for x in expected])

    def test_sort_target_without_order_sorts_ascending(self):
        # etcd: a sort target other than KEY with order NONE means ASCEND.
        for k, v in (("c", "1"), ("a", "2"), ("b", "3")):
            self.etcd.put(self.k(k), v)
        got = self.etcd.get_prefix(self.p, sort_target="mod")
        self.assertEqual(keys(got), [self.k(x).encode() for x in "cab"])
        got = self.etcd.get_prefix(self.p, sort_target="value")
        self.assertEqual(keys(got), [self.k(x).encode() for x in "cab"])

    # ---- delete --------------------------------------------------------------------------

    def test_delete_reports_whether_a_key_was_deleted(self):
        self.etcd.put(self.k("a"), "1")
        rev0 = self.revision()
        self.assertTrue(self.etcd.delete(self.k("a")))
        self.assertEqual(self.revision(), rev0 + 1)
        self.assertEqual(self.etcd.get(self.k("a")), (None, None))
        self.assertFalse(self.etcd.delete(self.k("a")))
        self.assertEqual(self.revision(), rev0 + 1)

    def test_delete_with_prev_kv_returns_deleted_pair(self):
        self.etcd.put(self.k("a"), "gone")
        resp = self.etcd.delete(self.k("a"), prev_kv=True, return_response=True)
        self.assertEqual(resp.deleted, 1)
        self.assertEqual([(kv.key, kv.value) for kv in resp.prev_kvs], [(self.k("a").encode(), b"gone")])

    def test_delete_prefix_deletes_only_keys_under_prefix(self):
        for k in ("d/1", "d/2", "d/3/x", "e", "d"):
            self.etcd.put(self.k(k), "v")
        rev0 = self.revision()
        resp = self.etcd.delete_prefix(self.k("d/"))
        self.assertEqual((resp.deleted, resp.header.revision), (3, rev0 + 1))
        self.assertEqual(keys(self.etcd.get_prefix(self.p)), [self.k("d").encode(), self.k("e").encode()])

    # ---- replace / put_if_not_exists ----------------------------------------------------

    def test_replace_with_matching_value_swaps_it(self):
        self.etcd.put(self.k("a"), "old")
        rev0 = self.revision()
        self.assertTrue(self.etcd.replace(self.k("a"), "old", "new"))
        value, meta = self.etcd.get(self.k("a"))
        self.assertEqual((value, meta.mod_revision, meta.version), (b"new", rev0 + 1, 2))

    def test_replace_with_other_value_changes_nothing(self):
        self.etcd.put(self.k("a"), "current")
        rev0 = self.revision()
        self.assertFalse(self.etcd.replace(self.k("a"), "stale", "new"))
        self.assertFalse(self.etcd.replace(self.k("missing"), "stale", "new"))
        value, meta = self.etcd.get(self.k("a"))
        self.assertEqual((value, meta.mod_revision), (b"current", rev0))
        self.assertEqual(self.etcd.get(self.k("missing")), (None, None))
        self.assertEqual(self.revision(), rev0)

    def test_put_if_not_exists_writes_only_a_missing_key(self):
        self.assertTrue(self.etcd.put_if_not_exists(self.k("a"), "first"))
        self.assertFalse(self.etcd.put_if_not_exists(self.k("a"), "second"))
        self.assertEqual(self.etcd.get(self.k("a"))[0], b"first")

    # ---- transactions --------------------------------------------------------------------

    def test_txn_compares_choose_branch_for_each_target(self):
        t = self.t
        self.etcd.put(self.k("a"), "v1")
        self.etcd.put(self.k("a"), "v2")
        _, meta = self.etcd.get(self.k("a"))     # version 2
        create, mod = meta.create_revision, meta.mod_revision
        a = self.k("a")
        cases = [
            ("value ==", t.value(a) == "v2", t.value(a) == "v1"),
            ("value !=", t.value(a) != "v1", t.value(a) != "v2"),
            ("value <", t.value(a) < "v3", t.value(a) < "v2"),
            ("value >", t.value(a) > "v1", t.value(a) > "v2"),
            ("version ==", t.version(a) == 2, t.version(a) == 1),
            ("version >", t.version(a) > 1, t.version(a) > 2),
            ("version <", t.version(a) < 3, t.version(a) < 2),
            ("create ==", t.create(a) == create, t.create(a) == create + 1),
            ("create <", t.create(a) < create + 1, t.create(a) < create),
            ("mod ==", t.mod(a) == mod, t.mod(a) == mod - 1),
            ("mod >", t.mod(a) > mod - 1, t.mod(a) > mod),
            ("mod !=", t.mod(a) != create, t.mod(a) != mod),
            ("missing key: version == 0", t.version(self.k("nope")) == 0, t.version(self.k("nope")) > 0),
            ("missing key: create == 0", t.create(self.k("nope")) == 0, t.create(self.k("nope")) != 0),
        ]
        for name, true_cmp, false_cmp in cases:
            with self.subTest(name):
                ok, resp = self.etcd.transaction(compare=[true_cmp], success=[t.get(a)],
                                                 failure=[t.get(self.k("nope"))])
                self.assertTrue(ok)
                self.assertEqual([values(r) for r in resp], [[b"v2"]])
                ok, resp = self.etcd.transaction(compare=[false_cmp], success=[t.get(a)],
                                                 failure=[t.get(self.k("nope"))])
                self.assertFalse(ok)
                self.assertEqual(resp, [[]])
                ok, _ = self.etcd.transaction(compare=[true_cmp, false_cmp], success=[], failure=[])
                self.assertFalse(ok, "all compares must hold")

    def test_txn_success_branch_applies_puts_gets_and_deletes_in_order(self):
        t = self.t
        self.etcd.put(self.k("lock"), "free")
        self.etcd.put(self.k("old"), "doomed")
        rev0 = self.revision()
        ok, resp = self.etcd.transaction(
            compare=[t.value(self.k("lock")) == "free", t.version(self.k("old")) == 1],
            success=[t.put(self.k("lock"), "held"), t.get(self.k("lock")),
                     t.delete(self.k("old")), t.put(self.k("new"), "born"), t.get(self.k("old"))],
            failure=[t.put(self.k("failed"), "yes")])
        self.assertTrue(ok)
        self.assertEqual(len(resp), 5)
        self.assertEqual(resp[0].response_put.header.revision, rev0 + 1)
        # A get after a put in the same txn sees the put.
        self.assertEqual(values(resp[1]), [b"held"])
        self.assertEqual(resp[1][0][1].mod_revision, rev0 + 1)
        self.assertEqual(resp[2].response_delete_range.deleted, 1)
        self.assertEqual(resp[4], [])
        self.assertEqual(self.revision(), rev0 + 1)
        self.assertEqual(self.etcd.get(self.k("lock"))[0], b"held")
        self.assertEqual(self.etcd.get(self.k("new"))[1].mod_revision, rev0 + 1)
        self.assertEqual(self.etcd.get(self.k("old")), (None, None))
        self.assertEqual(self.etcd.get(self.k("failed")), (None, None))

    def test_txn_failure_branch_applies_when_any_compare_fails(self):
        t = self.t
        self.etcd.put(self.k("lock"), "held")
        self.etcd.put(self.k("victim"), "x")
        rev0 = self.revision()
        ok, resp = self.etcd.transaction(
            compare=[t.value(self.k("lock")) == "free", t.create(self.k("victim")) > 0],
            success=[t.put(self.k("lock"), "mine")],
            failure=[t.get(self.k("lock")), t.put(self.k("waiters"), "1"), t.delete(self.k("victim"))])
        self.assertFalse(ok)
        self.assertEqual(values(resp[0]), [b"held"])
        self.assertEqual(resp[1].response_put.header.revision, rev0 + 1)
        self.assertEqual(resp[2].response_delete_range.deleted, 1)
        self.assertEqual(self.etcd.get(self.k("lock"))[0], b"held")
        self.assertEqual(self.etcd.get(self.k("waiters"))[1].mod_revision, rev0 + 1)
        self.assertEqual(self.etcd.get(self.k("victim")), (None, None))
        self.assertEqual(self.revision(), rev0 + 1)

    def test_txn_can_get_and_delete_a_key_range(self):
        t = self.t
        for k in ("q/1", "q/2", "r"):
            self.etcd.put(self.k(k), k)
        ok, resp = self.etcd.transaction(
            compare=[], success=[t.get(self.k("q/"), self.k("q0")),
                                 t.delete(self.k("q/"), self.k("q0"), prev_kv=True)], failure=[])
        self.assertTrue(ok)
        self.assertEqual(values(resp[0]), [b"q/1", b"q/2"])
        self.assertEqual(resp[1].response_delete_range.deleted, 2)
        self.assertEqual([kv.value for kv in resp[1].response_delete_range.prev_kvs], [b"q/1", b"q/2"])
        self.assertEqual(keys(self.etcd.get_prefix(self.p)), [self.k("r").encode()])

    def test_nested_txn_runs_its_own_compares(self):
        t = self.t
        self.etcd.put(self.k("a"), "1")
        rev0 = self.revision()
        ok, resp = self.etcd.transaction(
            compare=[t.value(self.k("a")) == "1"],
            success=[t.txn(compare=[t.value(self.k("a")) == "2"],
                           success=[t.put(self.k("inner-success"), "x")],
                           failure=[t.put(self.k("inner-failure"), "y")]),
                     t.put(self.k("outer"), "z")],
            failure=[])
        self.assertTrue(ok)
        self.assertFalse(resp[0].response_txn.succeeded)
        self.assertEqual(self.etcd.get(self.k("inner-success")), (None, None))
        self.assertEqual(self.etcd.get(self.k("inner-failure"))[1].mod_revision, rev0 + 1)
        self.assertEqual(self.etcd.get(self.k("outer"))[1].mod_revision, rev0 + 1)
        self.assertEqual(self.revision(), rev0 + 1)

    def test_txn_puts_of_several_keys_get_one_revision(self):
        t = self.t
        rev0 = self.revision()
        ok, resp = self.etcd.transaction(compare=[], success=[t.put(self.k(x), x) for x in "abcd"],
                                         failure=[])
        self.assertTrue(ok)
        self.assertEqual([r.response_put.header.revision for r in resp], [rev0 + 1] * 4)
        self.assertEqual([m.mod_revision for _, m in self.etcd.get_prefix(self.p)], [rev0 + 1] * 4)

    # ---- leases (a put's lease id round-trips) ------------------------------------------

    # ---- status -------------------------------------------------------------------------

    def test_status_reports_leader_db_size_and_version(self):
        status = self.etcd.status()
        self.assertIsNotNone(status.leader, "status() names no leader among the members")
        members = list(self.etcd.members)
        self.assertEqual(len(members), 1)
        self.assertEqual(status.leader.id, members[0].id)
        self.assertEqual(status.leader.name, "default")
        self.assertIn(self.member.client_url, status.leader.client_urls)
        self.assertIn(self.member.peer_url, status.leader.peer_urls)
        self.assertGreater(status.db_size, 0)
        self.assertIsInstance(status.version, str)
        self.assertRegex(status.version, r"^\d+\.\d+\.\d+")
        self.assertGreater(status.raft_index, 0)
        self.assertGreater(status.raft_term, 0)


if __name__ == "__main__":
    harness.main()
