"""Test PKI and TLS members for the TLS tests (src/net/tls_pump.h).

    pki = Pki()                    # CA, server, clients, a second CA, a CRL, in a temp dir
    m = TlsMember(pki, ["--client-cert-auth"])   # https client URL, started and serving
    r = etcdctl_tls(m, pki, "put", "k", "v")     # Debian's etcdctl with --cacert/--cert/--key

Certificates are made with the `openssl` command: EC P-256 keys, one day of
validity, the server's SANs 127.0.0.1 and localhost. pki.crl lists the
"revoked" client, in DER: etcd 3.6 reads --client-crl-file with Go's
x509.ParseRevocationList, which takes DER only ("x509: malformed crl" for
PEM, which etcd 3.4's x509.ParseCRL also took); pki.crl_pem is the same CRL
in PEM. Everything lives under pki.dir (removed by cleanup()).
"""
import os
import shutil
import subprocess
import tempfile

import grpc

import harness

_serial = [1000]


def openssl(*args, cwd=None):
    r = subprocess.run(["openssl"] + list(args), capture_output=True, text=True, cwd=cwd, timeout=60)
    if r.returncode != 0:
        raise RuntimeError("openssl %s failed: %s" % (" ".join(args), r.stderr))
    return r.stdout


class Pki:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="etcdq-tls-pki-")
        self.ca, self.ca_key = self.make_ca("ca", "etcdq-test-ca")
        self.server, self.server_key = self.issue("server", "server", self.ca, self.ca_key,
                                                  "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                                                  "extendedKeyUsage=serverAuth,clientAuth\n")
        self.client, self.client_key = self.issue("client", "root", self.ca, self.ca_key,
                                                  "extendedKeyUsage=clientAuth\n")
        self.revoked, self.revoked_key = self.issue("revoked", "revoked", self.ca, self.ca_key,
                                                    "extendedKeyUsage=clientAuth\n")
        self.ca2, self.ca2_key = self.make_ca("ca2", "other-ca")
        self.client2, self.client2_key = self.issue("client2", "root", self.ca2, self.ca2_key,
                                                    "extendedKeyUsage=clientAuth\n")
        self.crl = self.make_crl()

    def path(self, name):
        return os.path.join(self.dir, name)

    def make_ca(self, name, cn):
        key, crt = self.path(name + ".key"), self.path(name + ".crt")
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-keyout", key, "-out", crt, "-days", "1", "-subj", "/CN=" + cn)
        return crt, key

    def issue(self, name, cn, ca, ca_key, ext, serial=None):
        """A key and a certificate signed by `ca`; returns (cert path, key path)."""
        key, csr, crt, extfile = (self.path(name + s) for s in (".key", ".csr", ".crt", ".ext"))
        with open(extfile, "w") as f:
            f.write(ext)
        _serial[0] += 1
        openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-keyout", key, "-out", csr, "-subj", "/CN=" + cn)
        openssl("x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-set_serial",
                str(serial or _serial[0]), "-days", "1", "-extfile", extfile, "-out", crt)
        return crt, key

    def make_crl(self):
        der = self.crl_of("crl", self.ca, self.ca_key, [self.revoked])
        self.crl_pem = self.path("crl.pem")
        return der

    def crl_of(self, name, ca, ca_key, revoked):
        """A CRL that `ca` signs listing the certificates `revoked` (paths):
        NAME.pem, and NAME.der (returned)."""
        db, num, cnf, crl = (self.path(name + s) for s in (".index", ".crlnumber", ".cnf", ".pem"))
        open(db, "w").close()
        with open(num, "w") as f:
            f.write("01\n")
        with open(cnf, "w") as f:
            f.write("[ca]\ndefault_ca = d\n[d]\ndatabase = %s\ncrlnumber = %s\ndefault_md = sha256\n"
                    "default_crl_days = 1\n" % (db, num))
        for cert in revoked:
            openssl("ca", "-config", cnf, "-keyfile", ca_key, "-cert", ca, "-revoke", cert)
        openssl("ca", "-config", cnf, "-keyfile", ca_key, "-cert", ca, "-gencrl", "-out", crl)
        der = self.path(name + ".der")
        openssl("crl", "-in", crl, "-outform", "DER", "-out", der)
        return der

    def intermediate(self, name, cn):
        """A CA certificate (and key) that the root CA signs: (cert path, key path)."""
        return self.issue(name, cn, self.ca, self.ca_key,
                          "basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\n")

    def chain_through(self, name, cn, inter, inter_key, ext):
        """A certificate that `inter` signs, in a file with `inter` after it
        (what a client presents: leaf, then intermediate): (chain path, key path)."""
        leaf, key = self.issue(name, cn, inter, inter_key, ext)
        chain = self.path(name + ".chain.crt")
        with open(chain, "w") as out:
            for part in (leaf, inter):
                with open(part) as f:
                    out.write(f.read())
        return chain, key

    def server_args(self):
        return ["--cert-file", self.server, "--key-file", self.server_key, "--trusted-ca-file", self.ca]

    def cleanup(self):
        shutil.rmtree(self.dir, ignore_errors=True)


def serial_of(pem_text):
    r = subprocess.run(["openssl", "x509", "-noout", "-serial"], input=pem_text, capture_output=True,
                       text=True, timeout=30)
    return r.stdout.strip()


def served_certificate(port, *extra):
    """The PEM certificate a new TLS connection to 127.0.0.1:port is shown (openssl s_client)."""
    r = subprocess.run(["openssl", "s_client", "-connect", "127.0.0.1:%d" % port, "-showcerts"] + list(extra),
                       input="", capture_output=True, text=True, timeout=30)
    out = r.stdout
    b = out.find("-----BEGIN CERTIFICATE-----")
    e = out.find("-----END CERTIFICATE-----")
    return (out[b:e + len("-----END CERTIFICATE-----")] + "\n") if b >= 0 and e > b else "", r


class TlsMember(harness.Member):
    """A member whose client URL is https:// (and, with http_too, a second plain one)."""

    def __init__(self, pki, extra_args=(), tls_args=None, http_too=False, start=True, name="default",
                 binary=None, client_creds=True):
        super().__init__(extra_args=extra_args, name=name, binary=binary, start=False)
        self.pki = pki
        self.client_creds = client_creds
        self.client_url = "https://127.0.0.1:%d" % self.client_port
        self.tls_args = pki.server_args() if tls_args is None else list(tls_args)
        self.http_port = harness.free_port() if http_too else None
        if start:
            try:
                self.start()
            except BaseException:
                self.cleanup()
                raise

    def args(self):
        urls = self.client_url
        if self.http_port:
            urls += ",http://127.0.0.1:%d" % self.http_port
        return [self.binary,
                "--name", self.name,
                "--data-dir", self.data_dir,
                "--listen-client-urls", urls,
                "--advertise-client-urls", self.client_url,
                "--listen-peer-urls", self.peer_url,
                "--initial-advertise-peer-urls", self.peer_url,
                "--initial-cluster", "%s=%s" % (self.name, self.peer_url),
                ] + self.tls_args + self.extra_args

    def credentials(self):
        def read(p):
            with open(p, "rb") as f:
                return f.read()
        if not self.client_creds:
            return grpc.ssl_channel_credentials(read(self.pki.ca))
        return grpc.ssl_channel_credentials(read(self.pki.ca), read(self.pki.client_key), read(self.pki.client))

    def channel(self):
        ch = grpc.secure_channel(self.endpoint, self.credentials(), options=harness.CHANNEL_OPTIONS)
        self._channels.append(ch)
        return ch

    def probe_channel(self):
        return grpc.secure_channel(self.endpoint, self.credentials(), options=harness.CHANNEL_OPTIONS)

def etcdctl_tls(endpoint, ca=None, cert=None, key=None, *args, extra=(), timeout=30):
    cmd = [harness.ETCDCTL, "--endpoints", endpoint, "--command-timeout=5s", "--dial-timeout=3s"]
    if ca:
        cmd += ["--cacert", ca]
    if cert:
        cmd += ["--cert", cert, "--key", key]
    cmd += list(extra) + list(args)
    return subprocess.run(cmd, env=dict(os.environ, ETCDCTL_API="3"), capture_output=True, text=True,
                          timeout=timeout)
