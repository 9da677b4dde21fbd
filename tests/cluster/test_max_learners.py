#!/usr/bin/python3
"""--max-learners (etcd 3.6): a cluster holds as many learners as it says
(etcd's default 1), and a MemberAdd of one more learner is refused with
etcd's "etcdserver: too many learner members in cluster".

    ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/cluster/test_max_learners.py
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402

from cluster import ClusterTestCase, main  # noqa: E402


class MaxLearners(ClusterTestCase):
    def test_max_learners_allows_that_many_learners_and_refuses_one_more(self):
        c = self.new_cluster(1, extra_args=["--max-learners=2"])
        c.add_member(learner=True, start=False)
        c.add_member(learner=True, start=False)
        with self.assertRaises(grpc.RpcError) as e:
            c.add_member(learner=True, start=False)
        self.assertEqual(e.exception.details(), "etcdserver: too many learner members in cluster")

    def test_by_default_one_learner_as_etcd(self):
        c = self.new_cluster(1)
        c.add_member(learner=True, start=False)
        with self.assertRaises(grpc.RpcError) as e:
            c.add_member(learner=True, start=False)
        self.assertEqual(e.exception.details(), "etcdserver: too many learner members in cluster")


if __name__ == "__main__":
    main()
