package clientv3test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

var serial int64 = 1

func newCA(t *testing.T, name string) *testCA {
	t.Helper()
	key := must(ecdsa.GenerateKey(elliptic.P256(), rand.Reader))(t)
	serial++
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der := must(x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key))(t)
	cert := must(x509.ParseCertificate(der))(t)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue signs a leaf certificate: a server's (IP SAN 127.0.0.1) or a
// client's. It returns the certificate and key in PEM.
func (ca *testCA) issue(t *testing.T, cn string, server bool) (certPEM, keyPEM []byte) {
	t.Helper()
	key := must(ecdsa.GenerateKey(elliptic.P256(), rand.Reader))(t)
	serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
		tmpl.DNSNames = []string{"localhost"}
	}
	der := must(x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key))(t)
	k := must(x509.MarshalPKCS8PrivateKey(key))(t)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: k})
}

func writeFile(t *testing.T, dir, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func clientTLSConfig(t *testing.T, trust *testCA, certPEM, keyPEM []byte) *tls.Config {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(trust.cert)
	tc := &tls.Config{RootCAs: pool}
	if certPEM != nil {
		pair := must(tls.X509KeyPair(certPEM, keyPEM))(t)
		tc.Certificates = []tls.Certificate{pair}
	}
	return tc
}

// TestClientTLSWithClientCertAuth: the client URL serves TLS with
// --client-cert-auth. A client with a certificate from the trusted CA
// reads and writes; one without a certificate, one whose certificate
// another CA signed, and a plaintext one are refused, and nothing they
// sent is applied.
func TestClientTLSWithClientCertAuth(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, "clientv3test CA")
	other := newCA(t, "another CA")
	srvCert, srvKey := ca.issue(t, "etcd server", true)
	cliCert, cliKey := ca.issue(t, "clientv3test client", false)
	strangerCert, strangerKey := other.issue(t, "stranger", false)
	good := clientTLSConfig(t, ca, cliCert, cliKey)

	c := startCluster(t, clusterConfig{
		tls: &serverTLS{
			certFile:       writeFile(t, dir, "server.crt", srvCert),
			keyFile:        writeFile(t, dir, "server.key", srvKey),
			caFile:         writeFile(t, dir, "ca.crt", ca.pem),
			clientCertAuth: true,
		},
		clientTLS: good,
	})
	if !strings.HasPrefix(c.members[0].clientURL, "https://") {
		t.Fatalf("client URL %s", c.members[0].clientURL)
	}
	cli := c.client()
	ctx := ctxT(t, 60*time.Second)
	must(cli.Put(ctx, "tls/k", "v"))(t)
	if r := must(cli.Get(ctx, "tls/k"))(t); len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "v" {
		t.Fatalf("get over TLS: %v", r.Kvs)
	}
	start := currentRev(t, cli) + 1
	wch := cli.Watch(ctx, "tls/", clientv3.WithPrefix(), clientv3.WithRev(start))

	// A client that presents its certificate whatever CAs the server asks
	// for (crypto/tls would otherwise send none that the server's list of
	// acceptable CAs leaves out).
	stranger := clientTLSConfig(t, ca, nil, nil)
	strangerPair := must(tls.X509KeyPair(strangerCert, strangerKey))(t)
	stranger.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &strangerPair, nil }
	refused := []struct {
		name string
		tc   *tls.Config
	}{
		{"no client certificate", clientTLSConfig(t, ca, nil, nil)},
		{"a certificate of another CA", stranger},
		{"plaintext", nil},
	}
	for _, r := range refused {
		bad, err := c.rawClient(c.endpoints(), r.tc)
		if err != nil {
			t.Fatalf("%s: clientv3.New: %v", r.name, err)
		}
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, perr := bad.Put(rctx, "tls/"+r.name, "must not be written")
		_, gerr := bad.Get(rctx, "tls/k")
		cancel()
		bad.Close()
		if perr == nil || gerr == nil {
			t.Fatalf("%s: put error %v, get error %v; want both refused", r.name, perr, gerr)
		}
		t.Logf("%s: refused: %v", r.name, perr)
	}

	// The same refusals seen at the TLS layer: the server ends the
	// handshake of a client without an acceptable certificate (in TLS 1.3
	// the client learns it at its first read).
	for _, r := range refused[:2] {
		tc := r.tc.Clone()
		tc.NextProtos = []string{"h2"}
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", c.members[0].endpoint(), tc)
		if err == nil {
			// Only a read: a write the server has not read when it
			// closes would make its kernel answer with a reset, which
			// can overtake the alert.
			_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
			_, err = conn.Read(make([]byte, 1))
			conn.Close()
		}
		if err == nil {
			t.Fatalf("%s: the TLS connection was accepted and answered", r.name)
		}
		// crypto/tls reports an alert the peer sent as a net.OpError
		// whose Op is "remote error".
		var op *net.OpError
		if !errors.As(err, &op) || op.Op != "remote error" {
			t.Fatalf("%s: %v, want a TLS alert from the server", r.name, err)
		}
		t.Logf("%s: TLS: %v", r.name, err)
	}

	// Only the good client's own write happened meanwhile.
	must(cli.Put(ctx, "tls/after", "v"))(t)
	evs := nextEvents(t, wch, 1, 10*time.Second)
	if string(evs[0].Kv.Key) != "tls/after" {
		t.Fatalf("a refused client's write was applied: %s", evs[0].Kv.Key)
	}
	if r := must(cli.Get(ctx, "tls/", clientv3.WithPrefix()))(t); keysOf(r.Kvs) != "tls/after,tls/k" {
		t.Fatalf("keys: %s", keysOf(r.Kvs))
	}
}
