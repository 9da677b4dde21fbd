package clientv3test

import (
	"errors"
	"sort"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestLeaseGrantTimeToLiveKeepAliveOnceAndRevoke(t *testing.T) {
	c := startCluster(t, clusterConfig{})
	cli := c.client()
	ctx := ctxT(t, 30*time.Second)

	g := must(cli.Grant(ctx, 30))(t)
	if g.ID == 0 || g.TTL != 30 {
		t.Fatalf("grant: id %x ttl %d, want ttl 30", g.ID, g.TTL)
	}
	must(cli.Put(ctx, "l/a", "a", clientv3.WithLease(g.ID)))(t)
	must(cli.Put(ctx, "l/b", "b", clientv3.WithLease(g.ID)))(t)

	ttl := must(cli.TimeToLive(ctx, g.ID, clientv3.WithAttachedKeys()))(t)
	// etcd lists a lease's keys in no particular order (a Go map's).
	keys := []string{}
	for _, k := range ttl.Keys {
		keys = append(keys, string(k))
	}
	sort.Strings(keys)
	if ttl.ID != g.ID || ttl.GrantedTTL != 30 || ttl.TTL <= 0 || ttl.TTL > 30 || strings.Join(keys, ",") != "l/a,l/b" {
		t.Fatalf("time to live: id %x granted %d ttl %d keys %q", ttl.ID, ttl.GrantedTTL, ttl.TTL, ttl.Keys)
	}
	if kv := must(cli.Get(ctx, "l/a"))(t).Kvs[0]; kv.Lease != int64(g.ID) {
		t.Fatalf("l/a's lease %x, want %x", kv.Lease, g.ID)
	}
	list := must(cli.Leases(ctx))(t)
	found := false
	for _, l := range list.Leases {
		found = found || l.ID == g.ID
	}
	if !found {
		t.Fatalf("Leases() = %v, without %x", list.Leases, g.ID)
	}
	ka := must(cli.KeepAliveOnce(ctx, g.ID))(t)
	if ka.ID != g.ID || ka.TTL != 30 {
		t.Fatalf("keep-alive once: id %x ttl %d", ka.ID, ka.TTL)
	}
	// A key moved to no lease leaves it.
	must(cli.Put(ctx, "l/b", "b2"))(t)
	ttl = must(cli.TimeToLive(ctx, g.ID, clientv3.WithAttachedKeys()))(t)
	if len(ttl.Keys) != 1 || string(ttl.Keys[0]) != "l/a" {
		t.Fatalf("keys after l/b was put without the lease: %q", ttl.Keys)
	}

	must(cli.Revoke(ctx, g.ID))(t)
	if r := must(cli.Get(ctx, "l/", clientv3.WithPrefix()))(t); keysOf(r.Kvs) != "l/b" {
		t.Fatalf("after revoke: keys %s, want l/b only", keysOf(r.Kvs))
	}
	gone := must(cli.TimeToLive(ctx, g.ID))(t)
	if gone.TTL != -1 {
		t.Fatalf("time to live of a revoked lease: ttl %d, want -1", gone.TTL)
	}
	if _, err := cli.KeepAliveOnce(ctx, g.ID); !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		t.Fatalf("keep-alive of a revoked lease: %v, want ErrLeaseNotFound", err)
	}
	if _, err := cli.Revoke(ctx, g.ID); !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		t.Fatalf("revoking twice: %v, want ErrLeaseNotFound", err)
	}
}

// etcd's minimum TTL is 1.5 election timeouts rounded up to a second: 2 s
// with the default 1 s. A shorter TTL is granted as that; more than
// MaxLeaseTTL (9,000,000,000 s) is refused.
func TestLeaseGrantRaisesAShortTTLToTheMinimum(t *testing.T) {
	c := startCluster(t, clusterConfig{})
	cli := c.client()
	ctx := ctxT(t, 30*time.Second)
	for _, asked := range []int64{0, 1} {
		g := must(cli.Grant(ctx, asked))(t)
		if g.TTL != 2 {
			t.Fatalf("grant of %d s: ttl %d, want 2", asked, g.TTL)
		}
		if ka := must(cli.KeepAliveOnce(ctx, g.ID))(t); ka.TTL != 2 {
			t.Fatalf("keep-alive of a lease granted %d s: ttl %d, want 2", asked, ka.TTL)
		}
		if ttl := must(cli.TimeToLive(ctx, g.ID))(t); ttl.GrantedTTL != 2 || ttl.TTL < 0 || ttl.TTL > 2 {
			t.Fatalf("time to live of a lease granted %d s: granted %d ttl %d", asked, ttl.GrantedTTL, ttl.TTL)
		}
	}
	if _, err := cli.Grant(ctx, 9_000_000_001); !errors.Is(err, rpctypes.ErrLeaseTTLTooLarge) {
		t.Fatalf("grant over the maximum TTL: %v, want ErrLeaseTTLTooLarge", err)
	}
}

func TestLeaseExpiryDeletesItsKeysAfterTheTTL(t *testing.T) {
	c := startCluster(t, clusterConfig{})
	cli := c.client()
	ctx := ctxT(t, 30*time.Second)
	start := currentRev(t, cli) + 1
	wch := cli.Watch(ctx, "exp/", clientv3.WithPrefix(), clientv3.WithRev(start))

	before := time.Now()
	g := must(cli.Grant(ctx, 2))(t)
	must(cli.Put(ctx, "exp/k", "v", clientv3.WithLease(g.ID)))(t)
	evs := nextEvents(t, wch, 2, 15*time.Second)
	took := time.Since(before)
	if evs[1].Type != mvccpb.DELETE || string(evs[1].Kv.Key) != "exp/k" {
		t.Fatalf("second event %v, want the delete of exp/k", evs[1])
	}
	if took < 2*time.Second || took > 8*time.Second {
		t.Fatalf("a 2 s lease expired after %v", took)
	}
	if ttl := must(cli.TimeToLive(ctx, g.ID))(t); ttl.TTL != -1 {
		t.Fatalf("time to live of an expired lease: %d", ttl.TTL)
	}
}

// TestClusterLeaseKeepAliveSurvivesALeaderKill: a lease kept alive through a
// client of all three members outlives the SIGKILL of the leader, by more
// than twice its TTL, and the keep-alives go on under the new leader.
func TestClusterLeaseKeepAliveSurvivesALeaderKill(t *testing.T) {
	c := startCluster(t, clusterConfig{size: 3})
	cli := c.client()
	ctx := ctxT(t, 90*time.Second)
	const ttl = 5
	g := must(cli.Grant(ctx, ttl))(t)
	must(cli.Put(ctx, "ka/k", "v", clientv3.WithLease(g.ID)))(t)
	kach, err := cli.KeepAlive(ctx, g.ID)
	if err != nil {
		t.Fatalf("KeepAlive: %v", err)
	}
	var last time.Time
	var longest time.Duration // the longest wait between two responses
	recv := func(timeout time.Duration) *clientv3.LeaseKeepAliveResponse {
		t.Helper()
		select {
		case r, ok := <-kach:
			if !last.IsZero() {
				longest = max(longest, time.Since(last))
			}
			last = time.Now()
			if !ok {
				t.Fatalf("keep-alive channel closed (the lease expired or was lost)")
			}
			if r.ID != g.ID || r.TTL != ttl {
				t.Fatalf("keep-alive response: id %x ttl %d, want %x ttl %d", r.ID, r.TTL, g.ID, ttl)
			}
			return r
		case <-time.After(timeout):
			t.Fatalf("no keep-alive response within %v", timeout)
		}
		return nil
	}
	recv(5 * time.Second)

	old, err := c.leader(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	old.kill(t)
	killed := time.Now()
	t.Logf("killed leader %s", old.name)
	leader, err := c.leader(15 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	elected := time.Now()
	t.Logf("%s leads %v after the kill", leader.name, elected.Sub(killed).Round(time.Millisecond))

	// Keep-alives answered after the election, until twice the TTL has
	// passed since the kill: without them the lease would be gone.
	after := 0
	for time.Since(killed) < 2*ttl*time.Second || after < 2 {
		recv(2 * ttl * time.Second)
		if time.Now().After(elected) {
			after++
		}
	}
	// The client's stream moved to a live member without a pause as long
	// as the TTL.
	if longest >= ttl*time.Second {
		t.Fatalf("keep-alive responses stopped for %v across the failover, the TTL is %d s", longest, ttl)
	}
	left := must(cli.TimeToLive(ctx, g.ID, clientv3.WithAttachedKeys()))(t)
	if left.TTL <= 0 || left.GrantedTTL != ttl || len(left.Keys) != 1 {
		t.Fatalf("after the failover: ttl %d granted %d keys %q", left.TTL, left.GrantedTTL, left.Keys)
	}
	// Every live member still holds the key.
	for _, m := range c.members {
		if !m.alive() {
			continue
		}
		one := c.clientOf(m.endpoint())
		r := must(one.Get(ctx, "ka/k"))(t)
		if len(r.Kvs) != 1 || r.Kvs[0].Lease != int64(g.ID) {
			t.Fatalf("%s: ka/k = %v after the failover", m.name, r.Kvs)
		}
	}
	t.Logf("%d keep-alive responses after the new leader, %v after the kill; longest wait between two: %v",
		after, time.Since(killed).Round(time.Millisecond), longest.Round(time.Millisecond))
}
