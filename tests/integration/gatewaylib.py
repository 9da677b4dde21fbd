"""Helpers for the tests that compare JSON gateway answers of etcdq and etcd."""
import base64


def b64(s):
    """A str (as UTF-8) or bytes as the gateway's base64 bytes field."""
    return base64.b64encode(s.encode() if isinstance(s, str) else s).decode()


def normalize(v, volatile, key=None):
    """`v` (decoded JSON) with the value of every key in `volatile` replaced by
    "<key>", at any depth: what differs between two servers by nature (ids,
    terms, revisions) stops differing."""
    if isinstance(v, dict):
        return {k: normalize(x, volatile, k) for k, x in v.items()}
    if isinstance(v, list):
        return [normalize(x, volatile, key) for x in v]
    return "<%s>" % key if key in volatile else v


class BesideOracle:
    """For a harness.MemberTestCase: etcd 3.6 (the oracle) and a member under
    test, one of each for the whole class; both() names them for a loop."""

    @classmethod
    def setUpClass(cls):
        import harness   # the caller's sys.path has it (tests/integration)
        cls.oracle = cls.new_class_member(binary=harness.ORACLE)
        cls.m = cls.new_class_member()

    def both(self):
        return (("oracle", self.oracle), ("under test", self.m))
