package clientv3test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestPutGetDeleteKeepRevisionsVersionsAndPrevKV(t *testing.T) {
	c := startCluster(t, clusterConfig{})
	cli := c.client()
	ctx := ctxT(t, 30*time.Second)

	p1 := must(cli.Put(ctx, "kv/a", "1"))(t)
	if p1.PrevKv != nil {
		t.Fatalf("first put without WithPrevKV returned prev_kv %v", p1.PrevKv)
	}
	r1 := p1.Header.Revision
	p2 := must(cli.Put(ctx, "kv/a", "2", clientv3.WithPrevKV()))(t)
	if p2.Header.Revision != r1+1 {
		t.Fatalf("second put at revision %d, want %d", p2.Header.Revision, r1+1)
	}
	if p2.PrevKv == nil || string(p2.PrevKv.Value) != "1" || p2.PrevKv.ModRevision != r1 || p2.PrevKv.Version != 1 {
		t.Fatalf("prev_kv of the second put = %v, want value 1 at mod revision %d version 1", p2.PrevKv, r1)
	}
	must(cli.Put(ctx, "kv/b", "b"))(t)
	must(cli.Put(ctx, "kv/c", "c"))(t)
	must(cli.Put(ctx, "other", "o"))(t)

	g := must(cli.Get(ctx, "kv/a"))(t)
	if len(g.Kvs) != 1 {
		t.Fatalf("get kv/a: %d kvs", len(g.Kvs))
	}
	kv := g.Kvs[0]
	if string(kv.Value) != "2" || kv.CreateRevision != r1 || kv.ModRevision != r1+1 || kv.Version != 2 {
		t.Fatalf("kv/a = %v, want value 2 create %d mod %d version 2", kv, r1, r1+1)
	}
	if g.Header.Revision != r1+4 {
		t.Fatalf("get's header revision %d, want %d", g.Header.Revision, r1+4)
	}

	// The value at an older revision.
	old := must(cli.Get(ctx, "kv/a", clientv3.WithRev(r1)))(t)
	if len(old.Kvs) != 1 || string(old.Kvs[0].Value) != "1" {
		t.Fatalf("kv/a at revision %d = %v, want 1", r1, old.Kvs)
	}

	// Prefix, limit, sort, count and keys only.
	pre := must(cli.Get(ctx, "kv/", clientv3.WithPrefix()))(t)
	if keys := keysOf(pre.Kvs); keys != "kv/a,kv/b,kv/c" || pre.Count != 3 || pre.More {
		t.Fatalf("prefix kv/: keys %s count %d more %v", keys, pre.Count, pre.More)
	}
	lim := must(cli.Get(ctx, "kv/", clientv3.WithPrefix(), clientv3.WithLimit(2)))(t)
	if keys := keysOf(lim.Kvs); keys != "kv/a,kv/b" || lim.Count != 3 || !lim.More {
		t.Fatalf("prefix kv/ limit 2: keys %s count %d more %v", keys, lim.Count, lim.More)
	}
	desc := must(cli.Get(ctx, "kv/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend)))(t)
	if keys := keysOf(desc.Kvs); keys != "kv/c,kv/b,kv/a" {
		t.Fatalf("prefix kv/ sorted descending: %s", keys)
	}
	rng := must(cli.Get(ctx, "kv/b", clientv3.WithRange("kv/d")))(t)
	if keys := keysOf(rng.Kvs); keys != "kv/b,kv/c" {
		t.Fatalf("range [kv/b, kv/d): %s", keys)
	}
	from := must(cli.Get(ctx, "kv/c", clientv3.WithFromKey()))(t)
	if keys := keysOf(from.Kvs); keys != "kv/c,other" {
		t.Fatalf("from kv/c: %s", keys)
	}
	cnt := must(cli.Get(ctx, "kv/", clientv3.WithPrefix(), clientv3.WithCountOnly()))(t)
	if cnt.Count != 3 || len(cnt.Kvs) != 0 {
		t.Fatalf("count only: count %d, %d kvs", cnt.Count, len(cnt.Kvs))
	}
	ko := must(cli.Get(ctx, "kv/a", clientv3.WithKeysOnly()))(t)
	if len(ko.Kvs) != 1 || len(ko.Kvs[0].Value) != 0 || ko.Kvs[0].Version != 2 {
		t.Fatalf("keys only: %v", ko.Kvs)
	}
	none := must(cli.Get(ctx, "kv/none"))(t)
	if len(none.Kvs) != 0 || none.Count != 0 {
		t.Fatalf("missing key: %v", none.Kvs)
	}

	// Delete a range with prev_kv: the deleted versions, in key order.
	d := must(cli.Delete(ctx, "kv/", clientv3.WithPrefix(), clientv3.WithPrevKV()))(t)
	if d.Deleted != 3 || keysOf(d.PrevKvs) != "kv/a,kv/b,kv/c" || string(d.PrevKvs[0].Value) != "2" {
		t.Fatalf("delete prefix kv/: deleted %d prev_kvs %v", d.Deleted, d.PrevKvs)
	}
	if d.Header.Revision != r1+5 {
		t.Fatalf("delete at revision %d, want %d (one revision for the whole range)", d.Header.Revision, r1+5)
	}
	again := must(cli.Delete(ctx, "kv/", clientv3.WithPrefix()))(t)
	if again.Deleted != 0 || again.Header.Revision != r1+5 {
		t.Fatalf("deleting nothing: deleted %d at revision %d, want 0 at %d", again.Deleted, again.Header.Revision, r1+5)
	}
	// A key put again starts a new life: version 1, a new create revision.
	p3 := must(cli.Put(ctx, "kv/a", "3"))(t)
	g3 := must(cli.Get(ctx, "kv/a"))(t)
	if k := g3.Kvs[0]; k.Version != 1 || k.CreateRevision != p3.Header.Revision {
		t.Fatalf("kv/a put after delete: %v, want version 1 created at %d", k, p3.Header.Revision)
	}
}

func TestKVErrorsAreEtcdsRPCTypes(t *testing.T) {
	// --max-request-bytes small enough that a 100 KiB value is over it but
	// under gRPC's own limit (the limit plus 512 KiB): etcd's
	// ErrRequestTooLarge, not a transport error.
	c := startCluster(t, clusterConfig{extraArgs: []string{"--max-request-bytes", "65536"}})
	cli := c.client()
	ctx := ctxT(t, 30*time.Second)

	var revs []int64
	for i := 0; i < 5; i++ {
		revs = append(revs, must(cli.Put(ctx, "e/k", string(rune('a'+i))))(t).Header.Revision)
	}
	cur := revs[4]

	check := func(what string, err, want error) {
		t.Helper()
		if !errors.Is(err, want) {
			t.Errorf("%s: error %v, want %v", what, err, want)
		}
	}
	_, err := cli.Get(ctx, "e/k", clientv3.WithRev(cur+10))
	check("get at a future revision", err, rpctypes.ErrFutureRev)
	_, err = cli.Put(ctx, "", "v")
	check("put of the empty key", err, rpctypes.ErrEmptyKey)
	_, err = cli.Put(ctx, "e/lease", "v", clientv3.WithLease(clientv3.LeaseID(0x7fff0001)))
	check("put with a lease that does not exist", err, rpctypes.ErrLeaseNotFound)
	_, err = cli.Put(ctx, "e/big", strings.Repeat("x", 100*1024))
	check("put over --max-request-bytes", err, rpctypes.ErrRequestTooLarge)
	_, err = cli.Txn(ctx).Then(clientv3.OpPut("e/d", "1"), clientv3.OpPut("e/d", "2")).Commit()
	check("txn putting one key twice", err, rpctypes.ErrDuplicateKey)
	var ops []clientv3.Op
	for i := 0; i < 129; i++ { // etcd's default --max-txn-ops is 128
		ops = append(ops, clientv3.OpPut("e/many/"+string(rune('A'+i%26))+strings.Repeat("x", i/26), "v"))
	}
	_, err = cli.Txn(ctx).Then(ops...).Commit()
	check("txn of 129 operations", err, rpctypes.ErrTooManyOps)
	_, err = cli.Compact(ctx, cur+10)
	check("compact at a future revision", err, rpctypes.ErrFutureRev)

	// Nothing above changed the store.
	g := must(cli.Get(ctx, "e/", clientv3.WithPrefix()))(t)
	if keysOf(g.Kvs) != "e/k" || g.Header.Revision != cur {
		t.Fatalf("after refused requests: keys %s at revision %d, want e/k at %d", keysOf(g.Kvs), g.Header.Revision, cur)
	}

	must(cli.Compact(ctx, revs[2]))(t)
	_, err = cli.Get(ctx, "e/k", clientv3.WithRev(revs[1]))
	check("get below the compacted revision", err, rpctypes.ErrCompacted)
	_, err = cli.Compact(ctx, revs[1])
	check("compacting again below the compacted revision", err, rpctypes.ErrCompacted)
	at := must(cli.Get(ctx, "e/k", clientv3.WithRev(revs[2])))(t)
	if len(at.Kvs) != 1 || string(at.Kvs[0].Value) != "c" {
		t.Fatalf("get at the compacted revision itself: %v, want value c", at.Kvs)
	}
}

func TestTxnComparesBranchesAndPrevKV(t *testing.T) {
	c := startCluster(t, clusterConfig{})
	cli := c.client()
	ctx := ctxT(t, 30*time.Second)

	p := must(cli.Put(ctx, "t/k", "v1"))(t)
	rev := p.Header.Revision
	lease := must(cli.Grant(ctx, 60))(t)
	must(cli.Put(ctx, "t/leased", "l", clientv3.WithLease(lease.ID)))(t)

	// Every compare true: Then runs, with prev_kv on its put.
	tr := must(cli.Txn(ctx).If(
		clientv3.Compare(clientv3.Value("t/k"), "=", "v1"),
		clientv3.Compare(clientv3.Version("t/k"), "=", 1),
		clientv3.Compare(clientv3.CreateRevision("t/k"), "=", rev),
		clientv3.Compare(clientv3.ModRevision("t/k"), "<", rev+5),
		clientv3.Compare(clientv3.LeaseValue("t/leased"), "=", lease.ID),
		clientv3.Compare(clientv3.Value("t/k"), "!=", "v0"),
	).Then(
		clientv3.OpPut("t/k", "v2", clientv3.WithPrevKV()),
		clientv3.OpGet("t/k"),
		clientv3.OpDelete("t/none", clientv3.WithPrevKV()),
	).Else(
		clientv3.OpPut("t/else", "x"),
	).Commit())(t)
	if !tr.Succeeded || len(tr.Responses) != 3 {
		t.Fatalf("txn with true compares: succeeded %v, %d responses", tr.Succeeded, len(tr.Responses))
	}
	put := tr.Responses[0].GetResponsePut()
	if put == nil || put.PrevKv == nil || string(put.PrevKv.Value) != "v1" {
		t.Fatalf("txn put's prev_kv = %v, want v1", put)
	}
	get := tr.Responses[1].GetResponseRange()
	if get == nil || len(get.Kvs) != 1 || string(get.Kvs[0].Value) != "v2" || get.Kvs[0].ModRevision != tr.Header.Revision {
		t.Fatalf("txn get after its own put = %v, want v2 at %d", get, tr.Header.Revision)
	}
	del := tr.Responses[2].GetResponseDeleteRange()
	if del == nil || del.Deleted != 0 || len(del.PrevKvs) != 0 {
		t.Fatalf("txn delete of a missing key = %v", del)
	}
	if g := must(cli.Get(ctx, "t/else"))(t); len(g.Kvs) != 0 {
		t.Fatalf("else branch ran beside then")
	}

	// One compare false: Else runs and Then does not.
	fr := must(cli.Txn(ctx).If(
		clientv3.Compare(clientv3.Value("t/k"), "=", "v2"),
		clientv3.Compare(clientv3.Version("t/k"), ">", 5),
	).Then(
		clientv3.OpPut("t/then", "x"),
	).Else(
		clientv3.OpPut("t/else", "e", clientv3.WithPrevKV()),
		clientv3.OpGet("t/", clientv3.WithPrefix(), clientv3.WithCountOnly()),
	).Commit())(t)
	if fr.Succeeded || len(fr.Responses) != 2 {
		t.Fatalf("txn with a false compare: succeeded %v, %d responses", fr.Succeeded, len(fr.Responses))
	}
	if pk := fr.Responses[0].GetResponsePut().PrevKv; pk != nil {
		t.Fatalf("else put of a new key returned prev_kv %v", pk)
	}
	if n := fr.Responses[1].GetResponseRange().Count; n != 3 {
		t.Fatalf("else count of t/ = %d, want 3 (k, leased, else)", n)
	}
	if g := must(cli.Get(ctx, "t/then"))(t); len(g.Kvs) != 0 {
		t.Fatalf("then branch ran on a false compare")
	}

	// A missing key: its version, create and mod revision and lease compare as 0, and
	// a compare of its value is false whatever the operator.
	mr := must(cli.Txn(ctx).If(
		clientv3.Compare(clientv3.Version("t/missing"), "=", 0),
		clientv3.Compare(clientv3.CreateRevision("t/missing"), "=", 0),
		clientv3.Compare(clientv3.ModRevision("t/missing"), "<", 1),
		clientv3.Compare(clientv3.LeaseValue("t/missing"), "=", 0),
	).Commit())(t)
	if !mr.Succeeded {
		t.Fatalf("version/create/mod/lease of a missing key do not compare as 0")
	}
	for _, op := range []string{"=", "!=", "<", ">"} {
		vr := must(cli.Txn(ctx).If(clientv3.Compare(clientv3.Value("t/missing"), op, "")).Commit())(t)
		if vr.Succeeded {
			t.Fatalf("value of a missing key %s \"\" compared true", op)
		}
	}

	// A compare over a range: true only when it holds for every key in it.
	must(cli.Put(ctx, "t/r/1", "same"))(t)
	must(cli.Put(ctx, "t/r/2", "same"))(t)
	rr := must(cli.Txn(ctx).If(clientv3.Compare(clientv3.Value("t/r/"), "=", "same").WithPrefix()).Commit())(t)
	if !rr.Succeeded {
		t.Fatalf("range compare over equal values is false")
	}
	must(cli.Put(ctx, "t/r/3", "different"))(t)
	rr = must(cli.Txn(ctx).If(clientv3.Compare(clientv3.Value("t/r/"), "=", "same").WithPrefix()).Commit())(t)
	if rr.Succeeded {
		t.Fatalf("range compare with one different value is true")
	}

	// A nested txn: etcd evaluates every compare, nested ones too, against
	// the store as it was before the outer txn, so the inner compare does
	// not see the outer put and the inner else branch runs.
	nr := must(cli.Txn(ctx).Then(
		clientv3.OpPut("t/n", "outer"),
		clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.Value("t/n"), "=", "outer")},
			[]clientv3.Op{clientv3.OpPut("t/n2", "inner-then")},
			[]clientv3.Op{clientv3.OpPut("t/n2", "inner-else")},
		),
	).Commit())(t)
	inner := nr.Responses[1].GetResponseTxn()
	if inner == nil || inner.Succeeded {
		t.Fatalf("nested txn's compare saw the outer txn's own put: %v", inner)
	}
	if g := must(cli.Get(ctx, "t/n2"))(t); string(g.Kvs[0].Value) != "inner-else" {
		t.Fatalf("t/n2 = %s", g.Kvs[0].Value)
	}
	// Both writes of the outer txn are one revision.
	if g := must(cli.Get(ctx, "t/n"))(t); g.Kvs[0].ModRevision != nr.Header.Revision {
		t.Fatalf("t/n at %d, txn at %d", g.Kvs[0].ModRevision, nr.Header.Revision)
	}

	// A delete of a range inside a txn returns the deleted pairs.
	dr := must(cli.Txn(ctx).Then(clientv3.OpDelete("t/r/", clientv3.WithPrefix(), clientv3.WithPrevKV())).Commit())(t)
	dd := dr.Responses[0].GetResponseDeleteRange()
	if dd.Deleted != 3 || keysOf(dd.PrevKvs) != "t/r/1,t/r/2,t/r/3" {
		t.Fatalf("txn delete range: deleted %d prev %s", dd.Deleted, keysOf(dd.PrevKvs))
	}
	// A txn that reads only does not make a revision.
	before := must(cli.Get(ctx, "t/k"))(t).Header.Revision
	ro := must(cli.Txn(ctx).If(clientv3.Compare(clientv3.Value("t/k"), "=", "v2")).Then(clientv3.OpGet("t/k")).Commit())(t)
	if ro.Header.Revision != before {
		t.Fatalf("read-only txn at revision %d, want %d", ro.Header.Revision, before)
	}
}

func keysOf(kvs []*mvccpb.KeyValue) string {
	var ks []string
	for _, kv := range kvs {
		ks = append(ks, string(kv.Key))
	}
	return strings.Join(ks, ",")
}

// Range's revision filters, sorts and limits, and Put's ignore options.
// etcd's Count is the number of keys in the range before the revision
// filters prune it (etcdserver/txn: pruneKVs runs after the count), and a
// sort other than by key ascending, or a filter, is applied before the
// limit.
func TestRangeFiltersSortsLimitsAndPutIgnoreOptions(t *testing.T) {
	c := startCluster(t, clusterConfig{})
	cli := c.client()
	ctx := ctxT(t, 30*time.Second)

	// r/a created first and modified last; r/b and r/c in between.
	ra := must(cli.Put(ctx, "r/a", "3"))(t).Header.Revision
	rb := must(cli.Put(ctx, "r/b", "1"))(t).Header.Revision
	rc := must(cli.Put(ctx, "r/c", "2"))(t).Header.Revision
	ra2 := must(cli.Put(ctx, "r/a", "4"))(t).Header.Revision

	get := func(what string, want string, wantCount int64, wantMore bool, opts ...clientv3.OpOption) {
		t.Helper()
		r := must(cli.Get(ctx, "r/", append([]clientv3.OpOption{clientv3.WithPrefix()}, opts...)...))(t)
		if got := keysOf(r.Kvs); got != want || r.Count != wantCount || r.More != wantMore {
			t.Fatalf("%s: keys %s count %d more %v; want %s count %d more %v", what, got, r.Count, r.More, want, wantCount, wantMore)
		}
	}
	get("min mod revision", "r/a,r/c", 3, false, clientv3.WithMinModRev(rc))
	get("max mod revision", "r/b,r/c", 3, false, clientv3.WithMaxModRev(rc))
	get("min create revision", "r/b,r/c", 3, false, clientv3.WithMinCreateRev(rb))
	get("max create revision", "r/a,r/b", 3, false, clientv3.WithMaxCreateRev(rb))
	get("by mod revision, newest first, limit 2", "r/a,r/c", 3, true,
		clientv3.WithSort(clientv3.SortByModRevision, clientv3.SortDescend), clientv3.WithLimit(2))
	get("by create revision ascending", "r/a,r/b,r/c", 3, false, clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	get("by value ascending", "r/b,r/c,r/a", 3, false, clientv3.WithSort(clientv3.SortByValue, clientv3.SortAscend))
	get("by version descending, limit 1", "r/a", 3, true, clientv3.WithSort(clientv3.SortByVersion, clientv3.SortDescend), clientv3.WithLimit(1))
	get("by key descending", "r/c,r/b,r/a", 3, false, clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend))
	get("serializable", "r/a,r/b,r/c", 3, false, clientv3.WithSerializable())
	get("at the revision of r/b, newest first", "r/b,r/a", 2, false, clientv3.WithRev(rb),
		clientv3.WithSort(clientv3.SortByModRevision, clientv3.SortDescend))
	get("created no later than r/a", "r/a", 3, false, clientv3.WithMaxCreateRev(ra))

	// IgnoreValue keeps the value and takes a new lease; IgnoreLease keeps
	// the lease and takes a new value. On a missing key both are
	// ErrKeyNotFound.
	l := must(cli.Grant(ctx, 60))(t)
	iv := must(cli.Put(ctx, "r/a", "", clientv3.WithIgnoreValue(), clientv3.WithLease(l.ID), clientv3.WithPrevKV()))(t)
	if iv.PrevKv == nil || string(iv.PrevKv.Value) != "4" || iv.PrevKv.ModRevision != ra2 {
		t.Fatalf("ignore-value put's prev_kv: %v", iv.PrevKv)
	}
	kv := must(cli.Get(ctx, "r/a"))(t).Kvs[0]
	if string(kv.Value) != "4" || kv.Lease != int64(l.ID) || kv.Version != 3 || kv.ModRevision != iv.Header.Revision {
		t.Fatalf("after an ignore-value put: %v", kv)
	}
	must(cli.Put(ctx, "r/a", "5", clientv3.WithIgnoreLease()))(t)
	kv = must(cli.Get(ctx, "r/a"))(t).Kvs[0]
	if string(kv.Value) != "5" || kv.Lease != int64(l.ID) || kv.Version != 4 {
		t.Fatalf("after an ignore-lease put: %v", kv)
	}
	for _, opt := range []clientv3.OpOption{clientv3.WithIgnoreValue(), clientv3.WithIgnoreLease()} {
		if _, err := cli.Put(ctx, "r/missing", "", opt); !errors.Is(err, rpctypes.ErrKeyNotFound) {
			t.Fatalf("ignore option on a missing key: %v, want ErrKeyNotFound", err)
		}
	}
	if _, err := cli.Put(ctx, "r/a", "x", clientv3.WithIgnoreValue()); !errors.Is(err, rpctypes.ErrValueProvided) {
		t.Fatalf("ignore-value with a value: %v, want ErrValueProvided", err)
	}
	if _, err := cli.Put(ctx, "r/a", "x", clientv3.WithIgnoreLease(), clientv3.WithLease(l.ID)); !errors.Is(err, rpctypes.ErrLeaseProvided) {
		t.Fatalf("ignore-lease with a lease: %v, want ErrLeaseProvided", err)
	}
}
