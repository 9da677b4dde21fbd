package clientv3test

import (
	"fmt"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// One write of the burst below: its revision and the events it made.
type burstEvent struct {
	typ   mvccpb.Event_EventType
	key   string
	value string // "" for a delete
	prev  string // the value it replaced, "" if the key did not exist
}

// watchLog is what one watcher received, response by response.
type watchLog struct {
	events    []*clientv3.Event
	multiRevs int // responses whose events span more than one revision
}

// collect reads wch until n events arrived (or the timeout), noting the
// responses that carried events of several revisions.
func collect(t *testing.T, name string, wch clientv3.WatchChan, n int, timeout time.Duration) watchLog {
	t.Helper()
	var l watchLog
	deadline := time.After(timeout)
	for len(l.events) < n {
		select {
		case wr, ok := <-wch:
			if !ok {
				t.Fatalf("%s: watch channel closed after %d of %d events", name, len(l.events), n)
			}
			if err := wr.Err(); err != nil {
				t.Fatalf("%s: watch error after %d of %d events: %v", name, len(l.events), n, err)
			}
			if len(wr.Events) > 1 && wr.Events[0].Kv.ModRevision != wr.Events[len(wr.Events)-1].Kv.ModRevision {
				l.multiRevs++
			}
			l.events = append(l.events, wr.Events...)
		case <-deadline:
			t.Fatalf("%s: %d of %d events within %v", name, len(l.events), n, timeout)
		}
	}
	if len(l.events) != n {
		t.Fatalf("%s: %d events, want %d", name, len(l.events), n)
	}
	return l
}

// check compares a watcher's events with the writes' own: each once, in
// revision order (a txn's in its order), prev_kv when asked.
func check(t *testing.T, name string, got []*clientv3.Event, want map[int64][]burstEvent, keep func(burstEvent) bool, prevKV bool) {
	t.Helper()
	var revs []int64
	for r := range want {
		revs = append(revs, r)
	}
	sort.Slice(revs, func(i, j int) bool { return revs[i] < revs[j] })
	i := 0
	for _, r := range revs {
		for _, w := range want[r] {
			if !keep(w) {
				continue
			}
			if i >= len(got) {
				t.Fatalf("%s: %d events, more expected (next %s %s at %d)", name, len(got), w.typ, w.key, r)
			}
			e := got[i]
			if e.Type != w.typ || string(e.Kv.Key) != w.key || e.Kv.ModRevision != r || string(e.Kv.Value) != w.value {
				t.Fatalf("%s: event %d is %s %q=%q at %d, want %s %q=%q at %d", name, i, e.Type, e.Kv.Key, e.Kv.Value,
					e.Kv.ModRevision, w.typ, w.key, w.value, r)
			}
			switch {
			case !prevKV && e.PrevKv != nil:
				t.Fatalf("%s: event %d (%s at %d) has a prev_kv it did not ask for", name, i, w.key, r)
			case prevKV && w.prev == "" && e.PrevKv != nil:
				t.Fatalf("%s: event %d (%s at %d) has prev_kv %q, the key did not exist", name, i, w.key, r, e.PrevKv.Value)
			case prevKV && w.prev != "" && (e.PrevKv == nil || string(e.PrevKv.Value) != w.prev):
				t.Fatalf("%s: event %d (%s at %d) prev_kv %v, want value %q", name, i, w.key, r, e.PrevKv, w.prev)
			}
			i++
		}
	}
	if i != len(got) {
		t.Fatalf("%s: %d events, want %d", name, len(got), i)
	}
}

// Many clients write at once, so one applied log entry holds many
// revisions: etcd's watch protocol lets a response carry several (etcd
// does it for watchers catching up), and clientv3 must see every event
// once, in order, with prev_kv and filters as asked, whether a server
// sends a revision a response or many.
func TestWatchManyRevisionsAResponseEachEventOnceInOrder(t *testing.T) {
	c := startCluster(t, clusterConfig{})
	cli := c.client()
	ctx := ctxT(t, 60*time.Second)
	start := currentRev(t, cli) + 1
	// Both watchers are synced before the burst: created, at the current revision.
	withPrev := cli.Watch(ctx, "co/", clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithRev(start),
		clientv3.WithCreatedNotify())
	deletesOnly := cli.Watch(ctx, "co/", clientv3.WithPrefix(), clientv3.WithFilterPut(), clientv3.WithRev(start),
		clientv3.WithCreatedNotify())
	for _, wch := range []clientv3.WatchChan{withPrev, deletesOnly} {
		select {
		case wr := <-wch:
			if !wr.Created {
				t.Fatalf("first watch response %+v, want created", wr)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no created response within 10 s")
		}
	}

	// 64 writers, each on keys of its own: put, txn of two puts, delete.
	const writers, rounds = 64, 6
	var mu sync.Mutex
	want := map[int64][]burstEvent{}
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for g := 0; g < writers; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			key, other := fmt.Sprintf("co/%02d/a", g), fmt.Sprintf("co/%02d/b", g)
			cur := map[string]string{}
			for r := 0; r < rounds; r++ {
				v := fmt.Sprintf("v%d.%d", g, r)
				var rev int64
				var evs []burstEvent
				switch r % 3 {
				case 0:
					resp, err := cli.Put(ctx, key, v)
					if err != nil {
						errs <- err
						return
					}
					rev = resp.Header.Revision
					evs = []burstEvent{{mvccpb.PUT, key, v, cur[key]}}
					cur[key] = v
				case 1:
					resp, err := cli.Txn(ctx).Then(clientv3.OpPut(key, v+"t"), clientv3.OpPut(other, v+"o")).Commit()
					if err != nil {
						errs <- err
						return
					}
					rev = resp.Header.Revision
					evs = []burstEvent{{mvccpb.PUT, key, v + "t", cur[key]}, {mvccpb.PUT, other, v + "o", cur[other]}}
					cur[key], cur[other] = v+"t", v+"o"
				case 2:
					resp, err := cli.Delete(ctx, key)
					if err != nil {
						errs <- err
						return
					}
					rev = resp.Header.Revision
					evs = []burstEvent{{mvccpb.DELETE, key, "", cur[key]}}
					delete(cur, key)
				}
				mu.Lock()
				if _, dup := want[rev]; dup {
					mu.Unlock()
					errs <- fmt.Errorf("two writes answered with revision %d", rev)
					return
				}
				want[rev] = evs
				mu.Unlock()
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("write: %v", err)
	}
	// And one watcher that starts in the past: it reads the burst from
	// storage (etcd batches up to 1,000 revisions a response there).
	fromPast := cli.Watch(ctx, "co/", clientv3.WithPrefix(), clientv3.WithRev(start))

	total, deletes := 0, 0
	for _, evs := range want {
		for _, e := range evs {
			total++
			if e.typ == mvccpb.DELETE {
				deletes++
			}
		}
	}
	all := func(burstEvent) bool { return true }
	prevLog := collect(t, "prev_kv watcher", withPrev, total, 20*time.Second)
	check(t, "prev_kv watcher", prevLog.events, want, all, true)
	delLog := collect(t, "WithFilterPut watcher", deletesOnly, deletes, 20*time.Second)
	check(t, "WithFilterPut watcher", delLog.events, want, func(e burstEvent) bool { return e.typ == mvccpb.DELETE }, false)
	pastLog := collect(t, "watcher from the past", fromPast, total, 20*time.Second)
	check(t, "watcher from the past", pastLog.events, want, all, false)
	t.Logf("%d events in %d revisions; responses with several revisions: prev_kv %d, deletes %d, from the past %d",
		total, len(want), prevLog.multiRevs, delLog.multiRevs, pastLog.multiRevs)

	if pastLog.multiRevs == 0 {
		t.Errorf("the watcher from the past got one revision a response: nothing was coalesced")
	}
	// etcd sends a synced watcher each revision on its own; etcdq sends it
	// what one applied entry (or a busy stream) holds at once.
	if filepath.Base(serverBin) != "etcd" && prevLog.multiRevs == 0 {
		t.Errorf("the synced prev_kv watcher got one revision a response under a %d-writer burst", writers)
	}

	// Nothing more arrives on the synced watchers: a put after the burst
	// is the next event each sees (no duplicate was left behind).
	after := must(cli.Put(ctx, "co/zz", "after"))(t).Header.Revision
	if evs := nextEvents(t, withPrev, 1, 10*time.Second); evs[0].Kv.ModRevision != after {
		t.Fatalf("next prev_kv event at %d, want %d", evs[0].Kv.ModRevision, after)
	}
}
