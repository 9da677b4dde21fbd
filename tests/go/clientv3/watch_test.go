package clientv3test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// nextEvents reads responses from wch until n events arrived, failing on a
// closed channel, an error or the timeout. Progress responses are skipped.
func nextEvents(t *testing.T, wch clientv3.WatchChan, n int, timeout time.Duration) []*clientv3.Event {
	t.Helper()
	var evs []*clientv3.Event
	deadline := time.After(timeout)
	for len(evs) < n {
		select {
		case wr, ok := <-wch:
			if !ok {
				t.Fatalf("watch channel closed after %d of %d events", len(evs), n)
			}
			if err := wr.Err(); err != nil {
				t.Fatalf("watch error after %d of %d events: %v", len(evs), n, err)
			}
			evs = append(evs, wr.Events...)
		case <-deadline:
			t.Fatalf("%d of %d events within %v", len(evs), n, timeout)
		}
	}
	if len(evs) != n {
		t.Fatalf("%d events, want %d", len(evs), n)
	}
	return evs
}

func currentRev(t *testing.T, cli *clientv3.Client) int64 {
	t.Helper()
	return must(cli.Get(context.Background(), "clientv3test-rev"))(t).Header.Revision
}

func TestWatchPrevKVCarriesTheReplacedAndDeletedValues(t *testing.T) {
	c := startCluster(t, clusterConfig{})
	cli := c.client()
	ctx := ctxT(t, 30*time.Second)
	start := currentRev(t, cli) + 1
	wch := cli.Watch(ctx, "w/", clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithRev(start))

	must(cli.Put(ctx, "w/a", "1"))(t)
	must(cli.Put(ctx, "w/a", "2"))(t)
	must(cli.Put(ctx, "outside", "x"))(t)
	must(cli.Delete(ctx, "w/a"))(t)

	evs := nextEvents(t, wch, 3, 10*time.Second)
	if e := evs[0]; e.Type != mvccpb.PUT || !e.IsCreate() || e.PrevKv != nil || string(e.Kv.Value) != "1" || e.Kv.ModRevision != start {
		t.Fatalf("first event %v prev %v, want a create of 1 at %d with no prev_kv", e.Kv, e.PrevKv, start)
	}
	if e := evs[1]; e.Type != mvccpb.PUT || !e.IsModify() || e.PrevKv == nil || string(e.PrevKv.Value) != "1" || e.PrevKv.ModRevision != start || e.Kv.Version != 2 {
		t.Fatalf("second event %v prev %v, want a modify to 2 whose prev_kv is 1 at %d", e.Kv, e.PrevKv, start)
	}
	if e := evs[2]; e.Type != mvccpb.DELETE || e.PrevKv == nil || string(e.PrevKv.Value) != "2" || e.Kv.ModRevision != start+3 || e.Kv.Version != 0 {
		t.Fatalf("third event %v prev %v, want a delete at %d whose prev_kv is 2", e.Kv, e.PrevKv, start+3)
	}

	// History from a past revision: the same events replayed, with prev_kv.
	replay := cli.Watch(ctx, "w/a", clientv3.WithPrevKV(), clientv3.WithRev(start+1))
	evs = nextEvents(t, replay, 2, 10*time.Second)
	if evs[0].Kv.ModRevision != start+1 || string(evs[0].PrevKv.Value) != "1" || evs[1].Type != mvccpb.DELETE || string(evs[1].PrevKv.Value) != "2" {
		t.Fatalf("replayed events: %v %v", evs[0], evs[1])
	}
}

// WithFilterPut and WithFilterDelete drop those events on the server: the
// watcher sees only the other kind, at the same revisions.
func TestWatchFiltersDropPutsOrDeletes(t *testing.T) {
	c := startCluster(t, clusterConfig{})
	cli := c.client()
	ctx := ctxT(t, 30*time.Second)
	start := currentRev(t, cli) + 1
	noPuts := cli.Watch(ctx, "flt/", clientv3.WithPrefix(), clientv3.WithFilterPut(), clientv3.WithRev(start))
	noDeletes := cli.Watch(ctx, "flt/", clientv3.WithPrefix(), clientv3.WithFilterDelete(), clientv3.WithRev(start))
	must(cli.Put(ctx, "flt/a", "1"))(t)
	must(cli.Put(ctx, "flt/b", "1"))(t)
	must(cli.Delete(ctx, "flt/a"))(t)
	must(cli.Put(ctx, "flt/a", "2"))(t)
	last := must(cli.Delete(ctx, "flt/", clientv3.WithPrefix()))(t).Header.Revision

	dels := nextEvents(t, noPuts, 3, 10*time.Second)
	for i, want := range []int64{start + 2, last, last} {
		if dels[i].Type != mvccpb.DELETE || dels[i].Kv.ModRevision != want {
			t.Fatalf("WithFilterPut event %d: %s at %d, want a delete at %d", i, dels[i].Type, dels[i].Kv.ModRevision, want)
		}
	}
	puts := nextEvents(t, noDeletes, 3, 10*time.Second)
	for i, want := range []int64{start, start + 1, start + 3} {
		if puts[i].Type != mvccpb.PUT || puts[i].Kv.ModRevision != want {
			t.Fatalf("WithFilterDelete event %d: %s at %d, want a put at %d", i, puts[i].Type, puts[i].Kv.ModRevision, want)
		}
	}
	// Nothing more on either: a put after them shows up only on noDeletes,
	// and is the next thing it receives.
	after := must(cli.Put(ctx, "flt/c", "3"))(t).Header.Revision
	if evs := nextEvents(t, noDeletes, 1, 10*time.Second); evs[0].Kv.ModRevision != after {
		t.Fatalf("next event on WithFilterDelete at %d, want %d", evs[0].Kv.ModRevision, after)
	}
	gone := must(cli.Delete(ctx, "flt/c"))(t).Header.Revision
	if evs := nextEvents(t, noPuts, 1, 10*time.Second); evs[0].Kv.ModRevision != gone {
		t.Fatalf("next event on WithFilterPut at %d, want %d (the put at %d leaked through)", evs[0].Kv.ModRevision, gone, after)
	}
}

func TestWatchProgressNotifyReportsTheCurrentRevision(t *testing.T) {
	c := startCluster(t, clusterConfig{extraArgs: []string{"--experimental-watch-progress-notify-interval", "300ms"}})
	cli := c.client()
	ctx := ctxT(t, 30*time.Second)
	start := currentRev(t, cli) + 1
	wch := cli.Watch(ctx, "pn/k", clientv3.WithProgressNotify(), clientv3.WithRev(start))

	// A write to another key moves the store's revision; the idle watcher
	// is told of it by a progress notification.
	other := must(cli.Put(ctx, "pn/other", "x"))(t).Header.Revision
	waitProgress := func(atLeast int64) int64 {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			select {
			case wr, ok := <-wch:
				if !ok || wr.Err() != nil {
					t.Fatalf("watch ended waiting for progress: %v", wr.Err())
				}
				if len(wr.Events) > 0 {
					t.Fatalf("unexpected events %v", wr.Events)
				}
				if wr.IsProgressNotify() && wr.Header.Revision >= atLeast {
					return wr.Header.Revision
				}
			case <-deadline:
				t.Fatalf("no progress notification at revision >= %d within 10 s", atLeast)
			}
		}
	}
	if got := waitProgress(other); got != other {
		t.Fatalf("progress notification at revision %d, want %d (no write since)", got, other)
	}
	// An event after it has a higher revision.
	put := must(cli.Put(ctx, "pn/k", "v"))(t).Header.Revision
	evs := nextEvents(t, wch, 1, 10*time.Second)
	if evs[0].Kv.ModRevision != put || put <= other {
		t.Fatalf("event at %d after progress at %d", evs[0].Kv.ModRevision, other)
	}
	if got := waitProgress(put); got != put {
		t.Fatalf("second progress notification at %d, want %d", got, put)
	}
}

// TestRequestProgressNeverPassesUndeliveredEvents asks for progress while
// writes go on. A progress response promises that the stream has sent
// every event up to its revision: its revision is at least that of every
// event received so far, and every later event has a higher revision.
func TestRequestProgressNeverPassesUndeliveredEvents(t *testing.T) {
	c := startCluster(t, clusterConfig{})
	cli := c.client()
	wcli := c.client()
	ctx := ctxT(t, 60*time.Second)
	start := currentRev(t, cli) + 1
	prefixes := []string{"rp/a/", "rp/b/"}
	// Two watchers on one stream: a progress response goes to both.
	var chans []clientv3.WatchChan
	for _, p := range prefixes {
		chans = append(chans, wcli.Watch(ctx, p, clientv3.WithPrefix(), clientv3.WithRev(start)))
	}

	// Four writers at once, so that revisions commit in batches and the
	// watchers may fall behind the store.
	const writers, writes = 4, 400
	var finalRev atomic.Int64
	writerDone := make(chan error, 1)
	go func() {
		var wg sync.WaitGroup
		errs := make(chan error, writers)
		for w := 0; w < writers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < writes; i += writers {
					// Every third write is to a key neither watcher sees.
					key := fmt.Sprintf("%s%d", prefixes[i%2], i)
					if i%3 == 2 {
						key = fmt.Sprintf("rp/unwatched/%d", i)
					}
					r, err := cli.Put(ctx, key, "v")
					if err != nil {
						errs <- err
						return
					}
					for cur := finalRev.Load(); cur < r.Header.Revision && !finalRev.CompareAndSwap(cur, r.Header.Revision); cur = finalRev.Load() {
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		writerDone <- <-errs
	}()
	stopAsking := make(chan struct{})
	askerDone := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stopAsking:
				askerDone <- nil
				return
			case <-time.After(2 * time.Millisecond):
			}
			if err := wcli.RequestProgress(ctx); err != nil {
				askerDone <- err
				return
			}
		}
	}()

	type state struct {
		lastEvent, lastProgress int64
		events, progresses      int
	}
	st := make([]state, len(chans))
	want := make([]int, len(chans))
	for i := 0; i < writes; i++ {
		if i%3 != 2 {
			want[i%2]++
		}
	}
	check := func(i int, wr clientv3.WatchResponse, ok bool) {
		t.Helper()
		if !ok || wr.Err() != nil {
			t.Fatalf("watcher %s ended: %v", prefixes[i], wr.Err())
		}
		s := &st[i]
		if wr.IsProgressNotify() {
			if wr.Header.Revision < s.lastEvent {
				t.Fatalf("watcher %s: progress at revision %d after an event at %d", prefixes[i], wr.Header.Revision, s.lastEvent)
			}
			if wr.Header.Revision < s.lastProgress {
				t.Fatalf("watcher %s: progress went back from %d to %d", prefixes[i], s.lastProgress, wr.Header.Revision)
			}
			s.lastProgress = wr.Header.Revision
			s.progresses++
			return
		}
		for _, ev := range wr.Events {
			r := ev.Kv.ModRevision
			if !strings.HasPrefix(string(ev.Kv.Key), prefixes[i]) {
				t.Fatalf("watcher %s got key %s", prefixes[i], ev.Kv.Key)
			}
			if r <= s.lastProgress {
				t.Fatalf("watcher %s: event at revision %d after a progress response at %d: the progress passed an event it had not sent", prefixes[i], r, s.lastProgress)
			}
			if r <= s.lastEvent {
				t.Fatalf("watcher %s: event at %d after one at %d", prefixes[i], r, s.lastEvent)
			}
			s.lastEvent = r
			s.events++
		}
	}

	writing := true
	deadline := time.After(45 * time.Second)
	for writing {
		select {
		case wr, ok := <-chans[0]:
			check(0, wr, ok)
		case wr, ok := <-chans[1]:
			check(1, wr, ok)
		case err := <-writerDone:
			if err != nil {
				t.Fatalf("writer: %v", err)
			}
			writing = false
		case <-deadline:
			t.Fatalf("writes not done within 45 s")
		}
	}
	close(stopAsking)
	if err := <-askerDone; err != nil {
		t.Fatalf("RequestProgress: %v", err)
	}
	// After the last write, a progress response at the final revision
	// comes after every event: each watcher then holds all of its own.
	final := finalRev.Load()
	settle := func(i int, wcli *clientv3.Client) {
		t.Helper()
		for st[i].lastProgress < final {
			if err := wcli.RequestProgress(ctx); err != nil {
				t.Fatalf("RequestProgress: %v", err)
			}
			select {
			case wr, ok := <-chans[i]:
				check(i, wr, ok)
			case <-time.After(10 * time.Second):
				t.Fatalf("watcher %s: no progress at revision %d within 10 s (last %d)", prefixes[i], final, st[i].lastProgress)
			}
		}
		if st[i].lastProgress != final {
			t.Fatalf("watcher %s: progress at %d, beyond the final revision %d", prefixes[i], st[i].lastProgress, final)
		}
		if st[i].events != want[i] {
			t.Fatalf("watcher %s: %d events before the progress at the final revision %d, want %d", prefixes[i], st[i].events, final, want[i])
		}
		t.Logf("watcher %s: %d events, %d progress responses", prefixes[i], st[i].events, st[i].progresses)
	}
	settle(0, wcli)
	settle(1, wcli)
	if st[0].progresses+st[1].progresses < 4 {
		t.Fatalf("only %d progress responses while writing: the check above proved little", st[0].progresses+st[1].progresses)
	}

	// A watcher from the first revision catches up through every write;
	// progress asked for once it is created waits for it (etcd answers
	// once every watcher of the stream is synced), so it too comes after
	// all of its events. A stream of its own: on wcli's, progress asked
	// for before its creation may be answered after it (etcd 3.6 sends
	// created and progress responses through different queues) and
	// clientv3 hands a progress response to every watcher of the stream.
	prefixes = append(prefixes, "rp/")
	st = append(st, state{})
	want = append(want, writes)
	ccli := c.client()
	chans = append(chans, ccli.Watch(ctx, "rp/", clientv3.WithPrefix(), clientv3.WithRev(start)))
	settle(2, ccli)
}

// Fragments: etcd splits a watch response larger than --max-request-bytes
// plus gRPC's 512 KiB allowance into parts, for a watcher created with
// WithFragment, and the client puts them together again. A client whose
// receive limit is under the whole response sees that: the fragmented
// watcher gets all events in one response, the other fails on the size.
func TestWatchFragmentsResponsesOverTheRequestLimit(t *testing.T) {
	const maxRequest = 16 * 1024
	c := startCluster(t, clusterConfig{extraArgs: []string{"--max-request-bytes", fmt.Sprint(maxRequest)}})
	cli := c.client()
	const recvLimit = 600 * 1024 // over max-request-bytes + 512 KiB, under the whole response
	small := c.clientWith(c.endpoints(), func(cfg *clientv3.Config) { cfg.MaxCallRecvMsgSize = recvLimit })
	ctx := ctxT(t, 60*time.Second)

	const keys = 60
	value := strings.Repeat("v", 15000)
	start := currentRev(t, cli) + 1
	for i := 0; i < keys; i++ {
		must(cli.Put(ctx, fmt.Sprintf("f/%02d", i), value))(t)
	}

	// Catching up from a past revision: the events of many revisions in
	// one response (about 900 KB).
	fwch := small.Watch(ctx, "f/", clientv3.WithPrefix(), clientv3.WithRev(start), clientv3.WithFragment())
	checkWhole := func(wch clientv3.WatchChan, typ mvccpb.Event_EventType, withPrev bool) {
		t.Helper()
		select {
		case wr, ok := <-wch:
			if !ok || wr.Err() != nil {
				t.Fatalf("fragmented watch ended: %v", wr.Err())
			}
			if len(wr.Events) != keys {
				t.Fatalf("fragmented watch: %d events in the first response, want all %d put together", len(wr.Events), keys)
			}
			for i, ev := range wr.Events {
				v := ev.Kv.Value
				if withPrev {
					if ev.PrevKv == nil {
						t.Fatalf("event %d has no prev_kv", i)
					}
					v = ev.PrevKv.Value
				}
				if ev.Type != typ || string(ev.Kv.Key) != fmt.Sprintf("f/%02d", i) || string(v) != value {
					t.Fatalf("event %d: %s %s (%d bytes)", i, ev.Type, ev.Kv.Key, len(v))
				}
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no response on the fragmented watch within 10 s")
		}
	}
	checkWhole(fwch, mvccpb.PUT, false)

	wantTooLarge := func(wch clientv3.WatchChan) {
		t.Helper()
		select {
		case wr, ok := <-wch:
			if !ok {
				t.Fatalf("unfragmented watch closed without a response")
			}
			if s, _ := status.FromError(wr.Err()); s.Code() != codes.ResourceExhausted {
				t.Fatalf("unfragmented watch: %d events, error %v; want the client's ResourceExhausted (one message over its limit)", len(wr.Events), wr.Err())
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no response on the unfragmented watch within 10 s")
		}
	}
	// Its own client: the error ends that client's watch stream.
	small2 := c.clientWith(c.endpoints(), func(cfg *clientv3.Config) { cfg.MaxCallRecvMsgSize = recvLimit })
	wantTooLarge(small2.Watch(ctx, "f/", clientv3.WithPrefix(), clientv3.WithRev(start)))

	// One revision over the limit: a delete of every key, with prev_kv.
	dwch := small.Watch(ctx, "f/", clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithFragment(), clientv3.WithCreatedNotify())
	small3 := c.clientWith(c.endpoints(), func(cfg *clientv3.Config) { cfg.MaxCallRecvMsgSize = recvLimit })
	uwch := small3.Watch(ctx, "f/", clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithCreatedNotify())
	for _, wch := range []clientv3.WatchChan{dwch, uwch} {
		if wr := <-wch; !wr.Created {
			t.Fatalf("first response is not the created one: %v", wr)
		}
	}
	del := must(cli.Delete(ctx, "f/", clientv3.WithPrefix()))(t)
	if del.Deleted != keys {
		t.Fatalf("deleted %d", del.Deleted)
	}
	checkWhole(dwch, mvccpb.DELETE, true)
	wantTooLarge(uwch)
}

func TestWatchFromACompactedRevisionIsCanceledWithTheCompactRevision(t *testing.T) {
	c := startCluster(t, clusterConfig{})
	cli := c.client()
	ctx := ctxT(t, 30*time.Second)
	start := currentRev(t, cli) + 1
	live := cli.Watch(ctx, "c/", clientv3.WithPrefix(), clientv3.WithRev(start))

	var revs []int64
	for i := 0; i < 5; i++ {
		revs = append(revs, must(cli.Put(ctx, "c/k", fmt.Sprint(i)))(t).Header.Revision)
	}
	evs := nextEvents(t, live, 5, 10*time.Second)
	if evs[4].Kv.ModRevision != revs[4] {
		t.Fatalf("live watcher's last event at %d, want %d", evs[4].Kv.ModRevision, revs[4])
	}
	must(cli.Compact(ctx, revs[3], clientv3.WithCompactPhysical()))(t)

	// A watcher from before the compacted revision: one canceled response
	// carrying the compact revision, then the channel closes.
	old := cli.Watch(ctx, "c/", clientv3.WithPrefix(), clientv3.WithRev(revs[1]))
	select {
	case wr, ok := <-old:
		if !ok {
			t.Fatalf("watch from a compacted revision closed without a response")
		}
		if !wr.Canceled || wr.CompactRevision != revs[3] || wr.Err() != rpctypes.ErrCompacted || len(wr.Events) != 0 {
			t.Fatalf("watch from compacted revision %d: canceled %v compact_revision %d err %v events %d; want canceled at %d with ErrCompacted",
				revs[1], wr.Canceled, wr.CompactRevision, wr.Err(), len(wr.Events), revs[3])
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no response to a watch from a compacted revision")
	}
	select {
	case wr, ok := <-old:
		if ok {
			t.Fatalf("watch channel still open after the compaction cancel: %v", wr)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("watch channel not closed after the compaction cancel")
	}

	// From the compacted revision itself: its version survives compaction.
	at := cli.Watch(ctx, "c/", clientv3.WithPrefix(), clientv3.WithRev(revs[3]))
	evs = nextEvents(t, at, 2, 10*time.Second)
	if evs[0].Kv.ModRevision != revs[3] || evs[1].Kv.ModRevision != revs[4] {
		t.Fatalf("watch from the compact revision: events at %d, %d", evs[0].Kv.ModRevision, evs[1].Kv.ModRevision)
	}

	// The watcher that was open across the compaction goes on.
	after := must(cli.Put(ctx, "c/k", "after"))(t).Header.Revision
	for _, wch := range []clientv3.WatchChan{live, at} {
		evs = nextEvents(t, wch, 1, 10*time.Second)
		if evs[0].Kv.ModRevision != after || string(evs[0].Kv.Value) != "after" {
			t.Fatalf("event after the compaction: %v", evs[0].Kv)
		}
	}
}
