package clientv3test

import (
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/namespace"
)

// TestNamespaceKVWatcherLeaseStayInsideTheirPrefix: clientv3's namespace
// wrappers put a prefix on every key they send and take it off every key
// they return; ranges and watches over "everything" stop at the prefix.
func TestNamespaceKVWatcherLeaseStayInsideTheirPrefix(t *testing.T) {
	c := startCluster(t, clusterConfig{})
	cli := c.client()
	ctx := ctxT(t, 30*time.Second)
	const pfx = "tenant1/"
	kv := namespace.NewKV(cli.KV, pfx)
	w := namespace.NewWatcher(cli.Watcher, pfx)
	lease := namespace.NewLease(cli.Lease, pfx)

	must(cli.Put(ctx, "outside", "o"))(t)
	must(cli.Put(ctx, "tenant2/a", "other tenant"))(t)
	start := currentRev(t, cli) + 1
	all := w.Watch(ctx, "", clientv3.WithFromKey(), clientv3.WithPrevKV(), clientv3.WithRev(start))
	one := w.Watch(ctx, "a", clientv3.WithRev(start))

	p := must(kv.Put(ctx, "a", "1"))(t)
	must(kv.Put(ctx, "b", "2"))(t)
	must(cli.Put(ctx, "tenant2/b", "not seen"))(t)
	if raw := must(cli.Get(ctx, pfx+"a"))(t); len(raw.Kvs) != 1 || string(raw.Kvs[0].Value) != "1" {
		t.Fatalf("the namespaced put is not stored under %sa: %v", pfx, raw.Kvs)
	}
	g := must(kv.Get(ctx, "a"))(t)
	if len(g.Kvs) != 1 || string(g.Kvs[0].Key) != "a" || g.Kvs[0].ModRevision != p.Header.Revision {
		t.Fatalf("namespaced get: %v", g.Kvs)
	}
	// "" with WithFromKey is every key of the namespace, and only those.
	everything := must(kv.Get(ctx, "", clientv3.WithFromKey()))(t)
	if keysOf(everything.Kvs) != "a,b" {
		t.Fatalf("namespaced get from \"\": %s", keysOf(everything.Kvs))
	}
	prefix := must(kv.Get(ctx, "", clientv3.WithPrefix()))(t)
	if keysOf(prefix.Kvs) != "a,b" {
		t.Fatalf("namespaced get with the empty prefix: %s", keysOf(prefix.Kvs))
	}
	pp := must(kv.Put(ctx, "a", "1b", clientv3.WithPrevKV()))(t)
	if pp.PrevKv == nil || string(pp.PrevKv.Key) != "a" {
		t.Fatalf("namespaced prev_kv: %v", pp.PrevKv)
	}

	// A txn: compares, both branches and their results, all namespaced.
	tr := must(kv.Txn(ctx).If(clientv3.Compare(clientv3.Value("a"), "=", "1b")).
		Then(clientv3.OpPut("c", "3", clientv3.WithPrevKV()), clientv3.OpGet("", clientv3.WithFromKey())).
		Else(clientv3.OpPut("else", "x")).Commit())(t)
	if !tr.Succeeded || keysOf(tr.Responses[1].GetResponseRange().Kvs) != "a,b,c" {
		t.Fatalf("namespaced txn: succeeded %v, range %v", tr.Succeeded, tr.Responses[1])
	}
	if raw := must(cli.Get(ctx, pfx+"c"))(t); len(raw.Kvs) != 1 {
		t.Fatalf("txn's put is not under the prefix")
	}

	// A lease through the namespaced Lease: its keys come back without the
	// prefix, and keys of the same lease outside it are left out.
	l := must(lease.Grant(ctx, 60))(t)
	must(kv.Put(ctx, "leased", "l", clientv3.WithLease(l.ID)))(t)
	must(cli.Put(ctx, "tenant2/leased", "l", clientv3.WithLease(l.ID)))(t)
	ttl := must(lease.TimeToLive(ctx, l.ID, clientv3.WithAttachedKeys()))(t)
	if len(ttl.Keys) != 1 || string(ttl.Keys[0]) != "leased" {
		t.Fatalf("namespaced TimeToLive keys: %q", ttl.Keys)
	}
	rawTTL := must(cli.TimeToLive(ctx, l.ID, clientv3.WithAttachedKeys()))(t)
	if len(rawTTL.Keys) != 2 {
		t.Fatalf("raw TimeToLive keys: %q", rawTTL.Keys)
	}
	must(lease.Revoke(ctx, l.ID))(t)

	// A delete of everything in the namespace leaves the rest.
	d := must(kv.Delete(ctx, "", clientv3.WithFromKey()))(t)
	if d.Deleted != 3 {
		t.Fatalf("namespaced delete of everything: %d deleted, want a, b, c", d.Deleted)
	}
	if rest := must(cli.Get(ctx, "", clientv3.WithFromKey()))(t); keysOf(rest.Kvs) != "outside,tenant2/a,tenant2/b" {
		t.Fatalf("keys left outside the namespace: %s", keysOf(rest.Kvs))
	}

	// The watches saw only the namespace, with the prefix taken off:
	// put a, put b, put a, put c, put leased, delete leased (revoke), then
	// the deletes of a, b, c (one revision).
	evs := nextEvents(t, all, 9, 10*time.Second)
	want := []struct {
		typ mvccpb.Event_EventType
		key string
	}{{mvccpb.PUT, "a"}, {mvccpb.PUT, "b"}, {mvccpb.PUT, "a"}, {mvccpb.PUT, "c"}, {mvccpb.PUT, "leased"},
		{mvccpb.DELETE, "leased"}, {mvccpb.DELETE, "a"}, {mvccpb.DELETE, "b"}, {mvccpb.DELETE, "c"}}
	for i, e := range evs {
		if e.Type != want[i].typ || string(e.Kv.Key) != want[i].key {
			t.Fatalf("namespaced watch event %d: %s %s, want %s %s", i, e.Type, e.Kv.Key, want[i].typ, want[i].key)
		}
	}
	if evs[2].PrevKv == nil || string(evs[2].PrevKv.Key) != "a" || string(evs[2].PrevKv.Value) != "1" {
		t.Fatalf("namespaced watch prev_kv: %v", evs[2].PrevKv)
	}
	evs = nextEvents(t, one, 3, 10*time.Second)
	if evs[0].Type != mvccpb.PUT || evs[1].Type != mvccpb.PUT || evs[2].Type != mvccpb.DELETE || string(evs[2].Kv.Key) != "a" {
		t.Fatalf("namespaced single-key watch: %v", evs)
	}
}
