#!/usr/bin/python3
"""Kubernetes' real kube-apiserver (1.20) on etcdq over mutual TLS, the same
steps on Debian's etcd 3.4, outputs compared. Not in CTest: it needs the
apiserver that ../shared/tools/kube-apiserver/build.sh builds (about 20 min,
once, into $W/bin, default /tmp/k8s/bin).

    /usr/bin/python3 tests/kube/kube_apiserver_tls.py [--etcdq build/etcdq] [--k8s /tmp/k8s/bin]
        [--auth] [--watch-cache=false] [--only etcdq|etcd]

Each server (etcd 3.4, then etcdq) runs as one member with an https client
URL and --client-cert-auth (tests/integration/tlslib.Pki: one CA for the
member, the apiserver's client certificate and its serving certificate).
With --auth, etcd's auth is enabled first (user root, role root) and the
apiserver is authenticated by its certificate's Common Name ("root"), as
Kubernetes deployments with etcd auth do. The apiserver then gets:

  1. a namespace, 30 ConfigMaps, a Deployment, a Secret;
  2. lists with --chunk-size=7 (paging through Range limits and continue keys);
  3. a `kubectl get -w` that must see a ConfigMap created after it started;
  4. an update and a delete;
  5. the member stopped (SIGTERM) and started again under it; the apiserver
     must serve again and see a write made after the restart;
  6. the apiserver's own compaction (--etcd-compaction-interval=10s) running
     meanwhile: its log must show no storage error (gRPC errors, etcdserver
     messages) other than the compacted watches it re-lists after, as on etcd.

Every step's output (object names, not timestamps) must be the same on both
servers; the script exits non-zero and prints the differences otherwise.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))

import harness  # noqa: E402
import tlslib  # noqa: E402

TOKEN = "etcdq-kube-test-token"


def sh(cmd, timeout=60, check=True):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError("%s failed (%d): %s %s" % (" ".join(cmd), r.returncode, r.stdout[-500:], r.stderr[-1500:]))
    return r


class Apiserver:
    def __init__(self, k8s, pki, member, workdir, watch_cache):
        self.k8s, self.pki, self.member, self.dir = k8s, pki, member, workdir
        self.port = harness.free_port()
        crt, key = pki.issue("apiserver-%d" % self.port, "kube-apiserver", pki.ca, pki.ca_key,
                             "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
        sa_key, sa_pub = os.path.join(workdir, "sa.key"), os.path.join(workdir, "sa.pub")
        tlslib.openssl("genrsa", "-out", sa_key, "2048")
        tlslib.openssl("rsa", "-in", sa_key, "-pubout", "-out", sa_pub)
        tokens = os.path.join(workdir, "tokens.csv")
        with open(tokens, "w") as f:
            f.write('%s,admin,admin,"system:masters"\n' % TOKEN)
        self.log_path = os.path.join(workdir, "apiserver.log")
        self.args = [os.path.join(k8s, "kube-apiserver"),
                     "--etcd-servers=https://" + member.endpoint, "--etcd-cafile=" + pki.ca,
                     "--etcd-certfile=" + pki.client, "--etcd-keyfile=" + pki.client_key,
                     "--etcd-compaction-interval=10s", "--watch-cache=%s" % watch_cache,
                     "--secure-port=%d" % self.port, "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
                     "--tls-cert-file=" + crt, "--tls-private-key-file=" + key, "--client-ca-file=" + pki.ca,
                     "--service-account-issuer=https://kubernetes.default.svc",
                     "--service-account-key-file=" + sa_pub, "--service-account-signing-key-file=" + sa_key,
                     "--token-auth-file=" + tokens, "--authorization-mode=Node,RBAC",
                     "--service-cluster-ip-range=10.0.0.0/24", "--enable-priority-and-fairness=false",
                     "--cert-dir=" + os.path.join(workdir, "certs")]
        self.proc = None

    def start(self, timeout=120):
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.args, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("kube-apiserver exited %d; log %s" % (self.proc.returncode, self.log_path))
            if self.kubectl("get", "--raw", "/readyz", check=False).returncode == 0:
                return
            time.sleep(1)
        raise RuntimeError("kube-apiserver not ready in %d s; log %s" % (timeout, self.log_path))

    def kubectl(self, *args, check=True, timeout=60):
        return sh([os.path.join(self.k8s, "kubectl"), "--server", "https://127.0.0.1:%d" % self.port,
                   "--token", TOKEN, "--insecure-skip-tls-verify", "--request-timeout=30s"] + list(args),
                  timeout=timeout, check=check)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc:
            self.log.close()


def until(fn, timeout, what):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            v = fn()
            if v:
                return v
        except Exception as e:  # noqa: BLE001 (the apiserver reconnecting: retry until the deadline)
            last = e
        time.sleep(1)
    raise RuntimeError("%s: not within %d s (last error: %s)" % (what, timeout, last))


def names(r):
    return sorted(line.strip() for line in r.stdout.splitlines() if line.strip())


def enable_auth(member, pki):
    def ctl(*a):
        r = tlslib.etcdctl_tls(member.endpoint, pki.ca, pki.client, pki.client_key, *a)
        if r.returncode != 0:
            raise RuntimeError("etcdctl %s: %s" % (" ".join(a), r.stderr))
    ctl("user", "add", "root", "--new-user-password=rootpw")
    ctl("role", "add", "root")
    ctl("user", "grant-role", "root", "root")
    ctl("auth", "enable")


def run(binary, k8s, auth, watch_cache, keep):
    """The steps against one server; returns [(step, output lines)]."""
    pki = tlslib.Pki()
    out = []
    member = tlslib.TlsMember(pki, ["--client-cert-auth"], binary=binary)
    workdir = tempfile.mkdtemp(prefix="kube-apiserver-")
    api = None
    try:
        if auth:
            enable_auth(member, pki)
        api = Apiserver(k8s, pki, member, workdir, watch_cache)
        api.start()
        k = api.kubectl
        k("create", "namespace", "q1")
        for i in range(30):
            k("-n", "q1", "create", "configmap", "cm%02d" % i, "--from-literal=i=%d" % i)
        k("-n", "q1", "create", "deployment", "web", "--image=nginx")
        k("-n", "q1", "create", "secret", "generic", "s1", "--from-literal=password=x")
        out.append(("configmaps, chunk 7", names(k("-n", "q1", "get", "configmaps", "--chunk-size=7", "-o", "name"))))
        out.append(("all namespaces chunk 3", names(k("get", "namespaces", "--chunk-size=3", "-o", "name"))))
        out.append(("deployments", names(k("-n", "q1", "get", "deployments", "-o", "name"))))
        out.append(("secret data", [k("-n", "q1", "get", "secret", "s1", "-o", "jsonpath={.data.password}").stdout]))

        w = subprocess.Popen([os.path.join(k8s, "kubectl"), "--server", "https://127.0.0.1:%d" % api.port,
                              "--token", TOKEN, "--insecure-skip-tls-verify", "-n", "q1", "get", "configmaps",
                              "-w", "-o", "name", "--watch-only"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            time.sleep(2)
            k("-n", "q1", "create", "configmap", "watched")
            k("-n", "q1", "patch", "configmap", "cm00", "-p", '{"data":{"i":"changed"}}')
            time.sleep(3)
        finally:
            w.terminate()
            wout, _ = w.communicate(timeout=10)
        out.append(("watch saw", sorted(set(wout.split()))))
        out.append(("patched", [k("-n", "q1", "get", "configmap", "cm00", "-o", "jsonpath={.data.i}").stdout]))
        k("-n", "q1", "delete", "configmap", "cm01")
        out.append(("after delete", names(k("-n", "q1", "get", "configmaps", "-o", "name"))))

        member.stop()
        time.sleep(2)
        member.start()
        until(lambda: k("-n", "q1", "create", "configmap", "after-restart", check=False).returncode == 0, 90,
              "a write through the apiserver after the member restarted")
        until(lambda: "configmap/after-restart" in names(k("-n", "q1", "get", "configmaps", "-o", "name")), 60,
              "the apiserver lists the write made after the restart")
        out.append(("after restart", names(k("-n", "q1", "get", "configmaps", "-o", "name", "--chunk-size=5"))))
        time.sleep(12)  # one --etcd-compaction-interval at least
        out.append(("after compaction", names(k("-n", "q1", "get", "configmaps", "-o", "name"))))
        # "required revision has been compacted" is the apiserver's watch
        # cache meeting its own compaction (it re-lists), on etcd as here.
        with open(api.log_path, errors="replace") as f:
            storage_errors = [line for line in f if ("etcdserver:" in line or "rpc error" in line)
                              and "required revision has been compacted" not in line]
        out.append(("apiserver storage errors (count)", [str(len(storage_errors))]))
        if storage_errors:
            sys.stderr.write("%s: apiserver storage errors, first 5:\n%s\n" % (binary, "".join(storage_errors[:5])))
        return out
    finally:
        if api:
            api.stop()
        member.cleanup()
        if keep:
            sys.stderr.write("kept %s\n" % workdir)
        else:
            subprocess.run(["rm", "-rf", workdir])
        pki.cleanup()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--etcdq", default=os.path.join(ROOT, "build", "etcdq"))
    ap.add_argument("--etcd", default="/usr/bin/etcd")
    ap.add_argument("--k8s", default=os.path.join(os.environ.get("W", "/tmp/k8s"), "bin"))
    ap.add_argument("--auth", action="store_true", help="etcd auth on; the apiserver logs in by certificate CN")
    ap.add_argument("--watch-cache", default="true")
    ap.add_argument("--only", choices=["etcd", "etcdq"])
    ap.add_argument("--keep", action="store_true", help="keep the apiserver's work dir (its log)")
    a = ap.parse_args()
    results = {}
    for name, binary in (("etcd", a.etcd), ("etcdq", a.etcdq)):
        if a.only and a.only != name:
            continue
        t = time.monotonic()
        results[name] = run(binary, a.k8s, a.auth, a.watch_cache, a.keep)
        print("%s: %d steps in %.0f s" % (name, len(results[name]), time.monotonic() - t))
        for step, lines in results[name]:
            print("  %-34s %s" % (step, " ".join(lines) if len(lines) < 8 else "%d: %s ... %s" %
                                  (len(lines), lines[0], lines[-1])))
    if len(results) < 2:
        return 0
    diff = [(s, e, q) for (s, e), (_, q) in zip(results["etcd"], results["etcdq"]) if e != q]
    for s, e, q in diff:
        print("DIFFERENT %s:\n  etcd  %s\n  etcdq %s" % (s, e, q))
    print("same output on etcd 3.4 and etcdq" if not diff else "%d steps differ" % len(diff))
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
