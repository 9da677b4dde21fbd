#!/usr/bin/python3
"""Single-key Range latency, linearizable and serializable, on each member of a
3-member cluster with client and peer mutual TLS, etcdq against etcd 3.6, with
etcd's `benchmark` (1 connection, 1 client, N requests per member).

    /usr/bin/python3 bench/follower_reads.py [--etcdq build/etcdq] [--total 1000]

Made to explain kube-apiserver's GET latency on 3 members
(tests/kube/kube_apiserver_current.py): a GET of one object is a
linearizable Range on whichever member the apiserver's client picked, so a
follower's read barrier is on its path.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "kube"))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import kube_apiserver_current as k  # noqa: E402  (Storage: n members, plain or mTLS)
import tlslib  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--etcdq", default=os.path.join(ROOT, "build", "etcdq"))
    ap.add_argument("--total", type=int, default=1000)
    a = ap.parse_args()
    e36 = subprocess.run(["bash", os.path.join(ROOT, "scripts", "etcd36.sh")], capture_output=True, text=True,
                         check=True).stdout.strip()
    for label, binary in (("etcdq", a.etcdq), ("etcd36", os.path.join(e36, "etcd"))):
        pki = tlslib.Pki()
        st = k.Storage(binary, 3, pki)
        try:
            st.start_all()
            time.sleep(2)
            leader = st.leader()
            tls = ["--cacert", pki.ca, "--cert", pki.client, "--key", pki.client_key]
            subprocess.run([os.path.join(e36, "etcdctl"), "--endpoints", st.members[0]["curl"]] + tls +
                           ["put", "/registry/k", "v" * 500], check=True, capture_output=True)
            for i in range(3):
                for cons in ("l", "s"):
                    r = subprocess.run([os.path.join(e36, "benchmark"), "--endpoints", st.members[i]["curl"],
                                        "--conns", "1", "--clients", "1"] + tls +
                                       ["range", "/registry/k", "--consistency", cons, "--total", str(a.total)],
                                       capture_output=True, text=True)
                    pc = {p: float(v) * 1e3 for p, v in re.findall(r"(\d+)% in (\S+) secs", r.stdout)}
                    print("%-6s %-8s %s  p50 %5.2f ms  p90 %5.2f  p99 %5.2f" % (
                        label, "leader" if i == leader else "follower",
                        "linearizable" if cons == "l" else "serializable",
                        pc.get("50", float("nan")), pc.get("90", float("nan")), pc.get("99", float("nan"))),
                        flush=True)
        finally:
            st.stop()
            shutil.rmtree(st.dir, ignore_errors=True)
            pki.cleanup()


if __name__ == "__main__":
    main()
