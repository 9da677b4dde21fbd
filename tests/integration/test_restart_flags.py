#!/usr/bin/python3
"""A member whose data dir exists starts from it whatever --initial-cluster says,
as etcd reads its members from its data dir then and ignores the flag
(etcdserver bootstrapWithWAL): restarting a member with a list that does not
name it (the first members' list, say) must not refuse it. A new member with
such a list is still refused, with etcd's message."""
import subprocess

import harness
from etcd3.etcdrpc import rpc_pb2

REFERENCE = harness.is_reference_etcd()


def with_initial_cluster(args, listed):
    """A member's flags with --initial-cluster replaced by `listed`."""
    i = args.index("--initial-cluster")
    return args[:i + 1] + [listed] + args[i + 2:]


class RestartFlags(harness.MemberTestCase):

    def test_restart_with_a_list_that_does_not_name_the_member_serves_its_data(self):
        m = self.new_member(name="m3")
        m.kv().Put(rpc_pb2.PutRequest(key=b"kept", value=b"v"), timeout=10)
        m.stop()
        others = "m0=http://127.0.0.1:%d,m1=http://127.0.0.1:%d" % (harness.free_port(), harness.free_port())
        flags = m.args
        m.args = lambda: with_initial_cluster(flags(), others)
        m.start()
        r = m.kv().Range(rpc_pb2.RangeRequest(key=b"kept"), timeout=10)
        self.assertEqual([kv.value for kv in r.kvs], [b"v"])
        if not REFERENCE:
            self.assertIn("--initial-cluster does not name m3", self.log_text(m))

    def test_new_member_not_in_the_list_is_refused(self):
        m = self.new_member(name="m3", start=False)
        others = "m0=http://127.0.0.1:%d" % harness.free_port()
        p = subprocess.run(with_initial_cluster(m.args(), others), capture_output=True, text=True, timeout=30)
        self.assertNotEqual(p.returncode, 0)
        # etcd's JSON log escapes the quotes.
        self.assertRegex(p.stderr, r'couldn\'t find local name \\?"m3\\?" in the initial cluster configuration')


if __name__ == "__main__":
    harness.main()
