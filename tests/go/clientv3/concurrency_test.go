package clientv3test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

func newSession(t *testing.T, cli *clientv3.Client) *concurrency.Session {
	t.Helper()
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
	if err != nil {
		t.Fatalf("NewSession: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func countPrefix(ctx context.Context, cli *clientv3.Client, prefix string) (int64, error) {
	r, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return r.Count, nil
}

// waitCount waits until prefix holds n keys.
func waitCount(t *testing.T, cli *clientv3.Client, prefix string, n int64) {
	t.Helper()
	eventually(t, 10*time.Second, fmt.Sprintf("%d keys under %s", n, prefix), func() error {
		got, err := countPrefix(context.Background(), cli, prefix)
		if err == nil && got != n {
			err = fmt.Errorf("%d keys", got)
		}
		return err
	})
}

func TestMutexGrantsInRequestOrderAndExcludes(t *testing.T) {
	c := startCluster(t, clusterConfig{})
	ctx := ctxT(t, 60*time.Second)
	const pfx = "/lock/"
	var ms []*concurrency.Mutex
	var ss []*concurrency.Session
	for i := 0; i < 3; i++ {
		s := newSession(t, c.client())
		ss = append(ss, s)
		ms = append(ms, concurrency.NewMutex(s, pfx))
	}
	obs := c.client()

	if err := ms[0].Lock(ctx); err != nil {
		t.Fatalf("first lock: %v", err)
	}
	if err := ms[1].TryLock(ctx); !errors.Is(err, concurrency.ErrLocked) {
		t.Fatalf("TryLock of a held mutex: %v, want ErrLocked", err)
	}
	// TryLock took its key away again.
	waitCount(t, obs, pfx, 1)

	got := make(chan int, 2)
	lockIn := func(i int) {
		go func() {
			if err := ms[i].Lock(ctx); err != nil {
				t.Errorf("lock %d: %v", i, err)
				return
			}
			got <- i
		}()
	}
	lockIn(1)
	waitCount(t, obs, pfx, 2)
	lockIn(2)
	waitCount(t, obs, pfx, 3)
	select {
	case i := <-got:
		t.Fatalf("mutex %d acquired while mutex 0 holds it", i)
	default:
	}
	// The holder's key is the oldest under the prefix.
	owner := must(obs.Get(ctx, pfx, clientv3.WithFirstCreate()...))(t)
	if string(owner.Kvs[0].Key) != ms[0].Key() {
		t.Fatalf("oldest key %s, holder's %s", owner.Kvs[0].Key, ms[0].Key())
	}

	if err := ms[0].Unlock(ctx); err != nil {
		t.Fatalf("unlock 0: %v", err)
	}
	select {
	case i := <-got:
		if i != 1 {
			t.Fatalf("mutex %d acquired first, want 1 (it asked first)", i)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no waiter acquired the mutex within 10 s of the unlock")
	}
	select {
	case i := <-got:
		t.Fatalf("mutex %d acquired while mutex 1 holds it", i)
	default:
	}
	if err := ms[0].TryLock(ctx); !errors.Is(err, concurrency.ErrLocked) {
		t.Fatalf("TryLock while mutex 1 holds it: %v, want ErrLocked", err)
	}
	// A holder whose session ends (its lease revoked) releases the mutex.
	if err := ss[1].Close(); err != nil {
		t.Fatalf("closing session 1: %v", err)
	}
	select {
	case i := <-got:
		if i != 2 {
			t.Fatalf("mutex %d acquired, want 2", i)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("mutex 2 did not acquire within 10 s of the holder's session ending")
	}
	if err := ms[2].Unlock(ctx); err != nil {
		t.Fatalf("unlock 2: %v", err)
	}
	waitCount(t, obs, pfx, 0)
}

// A holder whose session is no longer kept alive (its process gone, as
// Session.Orphan leaves it) loses the mutex when the session's lease
// expires, and the waiter gets it then, not before.
func TestMutexPassesOnWhenTheHoldersLeaseExpires(t *testing.T) {
	c := startCluster(t, clusterConfig{})
	ctx := ctxT(t, 60*time.Second)
	s1, err := concurrency.NewSession(c.client(), concurrency.WithTTL(2))
	if err != nil {
		t.Fatalf("NewSession: %v", err)
	}
	m1 := concurrency.NewMutex(s1, "/expiring-lock/")
	m2 := concurrency.NewMutex(newSession(t, c.client()), "/expiring-lock/")
	if err := m1.Lock(ctx); err != nil {
		t.Fatalf("lock: %v", err)
	}
	s1.Orphan()
	orphaned := time.Now()
	if err := m2.Lock(ctx); err != nil {
		t.Fatalf("waiter's lock: %v", err)
	}
	took := time.Since(orphaned)
	// Keep-alives went out at most about 1 s apart, so at least 1 s of the
	// TTL was left when they stopped; 500 ms is the margin.
	if took < 500*time.Millisecond || took > 10*time.Second {
		t.Fatalf("the waiter got the mutex %v after the holder stopped its keep-alives (TTL 2 s)", took)
	}
	if ttl := must(c.client().TimeToLive(ctx, s1.Lease()))(t); ttl.TTL != -1 {
		t.Fatalf("the orphaned session's lease: ttl %d, want -1 (expired)", ttl.TTL)
	}
	if err := m2.Unlock(ctx); err != nil {
		t.Fatalf("unlock: %v", err)
	}
	t.Logf("the waiter acquired %v after the holder's keep-alives stopped", took.Round(time.Millisecond))
}

// TestMutexKeepsReadModifyWriteExclusive: contending sessions each do a
// plain get-then-put of a counter under the mutex; no increment is lost
// and no two holders ever overlap.
func TestMutexKeepsReadModifyWriteExclusive(t *testing.T) {
	c := startCluster(t, clusterConfig{})
	ctx := ctxT(t, 120*time.Second)
	const workers, rounds = 3, 15
	var inside, overlaps atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		cli := c.client()
		m := concurrency.NewMutex(newSession(t, cli), "/counter-lock/")
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				if err := m.Lock(ctx); err != nil {
					errs <- err
					return
				}
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				r, err := cli.Get(ctx, "counter")
				n := 0
				if err == nil && len(r.Kvs) == 1 {
					n, err = strconv.Atoi(string(r.Kvs[0].Value))
				}
				if err == nil {
					_, err = cli.Put(ctx, "counter", strconv.Itoa(n+1))
				}
				inside.Add(-1)
				if err == nil {
					err = m.Unlock(ctx)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("worker: %v", err)
	}
	if overlaps.Load() != 0 {
		t.Fatalf("%d times a holder found another inside", overlaps.Load())
	}
	r := must(c.client().Get(ctx, "counter"))(t)
	if string(r.Kvs[0].Value) != strconv.Itoa(workers*rounds) {
		t.Fatalf("counter %s, want %d", r.Kvs[0].Value, workers*rounds)
	}
}

func TestElectionCampaignObserveProclaimResign(t *testing.T) {
	c := startCluster(t, clusterConfig{})
	ctx := ctxT(t, 60*time.Second)
	const pfx = "/elect/"
	e1 := concurrency.NewElection(newSession(t, c.client()), pfx)
	s2 := newSession(t, c.client())
	e2 := concurrency.NewElection(s2, pfx)
	watcher := concurrency.NewElection(newSession(t, c.client()), pfx)
	obs := c.client()

	if _, err := watcher.Leader(ctx); !errors.Is(err, concurrency.ErrElectionNoLeader) {
		t.Fatalf("Leader with no candidate: %v, want ErrElectionNoLeader", err)
	}
	if err := e1.Campaign(ctx, "a"); err != nil {
		t.Fatalf("campaign a: %v", err)
	}
	observed := watcher.Observe(ctx)
	next := func(want string) {
		t.Helper()
		select {
		case r, ok := <-observed:
			if !ok {
				t.Fatalf("observe channel closed waiting for %s", want)
			}
			if len(r.Kvs) != 1 || string(r.Kvs[0].Value) != want {
				t.Fatalf("observed %v, want leader value %s", r.Kvs, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("leader value %s not observed within 10 s", want)
		}
	}
	next("a")
	l := must(watcher.Leader(ctx))(t)
	if string(l.Kvs[0].Value) != "a" || string(l.Kvs[0].Key) != e1.Key() {
		t.Fatalf("leader %s=%s, want %s=a", l.Kvs[0].Key, l.Kvs[0].Value, e1.Key())
	}

	won := make(chan error, 1)
	go func() { won <- e2.Campaign(ctx, "b") }()
	waitCount(t, obs, pfx, 2)
	select {
	case err := <-won:
		t.Fatalf("second campaign returned (%v) while the first leads", err)
	default:
	}
	if err := e1.Proclaim(ctx, "a2"); err != nil {
		t.Fatalf("proclaim: %v", err)
	}
	next("a2")

	if err := e1.Resign(ctx); err != nil {
		t.Fatalf("resign: %v", err)
	}
	select {
	case err := <-won:
		if err != nil {
			t.Fatalf("second campaign: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("second campaign not won within 10 s of the resignation")
	}
	next("b")
	if l := must(e2.Leader(ctx))(t); string(l.Kvs[0].Value) != "b" {
		t.Fatalf("leader after the resignation: %s", l.Kvs[0].Value)
	}
	if err := e1.Proclaim(ctx, "x"); !errors.Is(err, concurrency.ErrElectionNotLeader) {
		t.Fatalf("proclaim by the resigned candidate: %v, want ErrElectionNotLeader", err)
	}
	// The leader's session ends: no leader is left.
	if err := s2.Close(); err != nil {
		t.Fatalf("closing the leader's session: %v", err)
	}
	waitCount(t, obs, pfx, 0)
	if _, err := watcher.Leader(ctx); !errors.Is(err, concurrency.ErrElectionNoLeader) {
		t.Fatalf("Leader after the leader's session ended: %v, want ErrElectionNoLeader", err)
	}
}

// TestSTMTransfersConserveTheTotal: concurrent transfers between accounts,
// each an STM transaction, under serializable and serializable-snapshot
// isolation. Conflicting commits are retried by the STM; the total never
// changes, no account goes negative, and a serializable reader always sees
// the total.
func TestSTMTransfersConserveTheTotal(t *testing.T) {
	c := startCluster(t, clusterConfig{})
	for _, iso := range []struct {
		name string
		iso  concurrency.Isolation
	}{{"Serializable", concurrency.Serializable}, {"SerializableSnapshot", concurrency.SerializableSnapshot}} {
		t.Run(iso.name, func(t *testing.T) {
			ctx := ctxT(t, 120*time.Second)
			const accounts, balance, workers, transfers = 5, 100, 4, 25
			pfx := "stm/" + iso.name + "/"
			key := func(i int) string { return fmt.Sprintf("%s%d", pfx, i) }
			cli := c.client()
			for i := 0; i < accounts; i++ {
				must(cli.Put(ctx, key(i), strconv.Itoa(balance)))(t)
			}
			var applies atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, workers+1)
			for w := 0; w < workers; w++ {
				wcli := c.client()
				rng := rand.New(rand.NewSource(int64(w)))
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < transfers; i++ {
						from, to := rng.Intn(accounts), rng.Intn(accounts-1)
						if to >= from {
							to++
						}
						amount := 1 + rng.Intn(40)
						_, err := concurrency.NewSTM(wcli, func(s concurrency.STM) error {
							applies.Add(1)
							fv, err1 := strconv.Atoi(s.Get(key(from)))
							tv, err2 := strconv.Atoi(s.Get(key(to)))
							if err := errors.Join(err1, err2); err != nil {
								return err
							}
							moved := min(amount, fv)
							s.Put(key(from), strconv.Itoa(fv-moved))
							s.Put(key(to), strconv.Itoa(tv+moved))
							return nil
						}, concurrency.WithIsolation(iso.iso), concurrency.WithAbortContext(ctx))
						if err != nil {
							errs <- fmt.Errorf("transfer %d of worker: %w", i, err)
							return
						}
					}
				}()
			}
			// A reader: every account read in one serializable STM sums
			// to the total.
			stop := make(chan struct{})
			reads := 0
			readerDone := make(chan struct{})
			go func() {
				defer close(readerDone)
				rcli := c.client()
				for {
					select {
					case <-stop:
						return
					default:
					}
					sum := 0
					_, err := concurrency.NewSTM(rcli, func(s concurrency.STM) error {
						sum = 0
						for i := 0; i < accounts; i++ {
							v, err := strconv.Atoi(s.Get(key(i)))
							if err != nil {
								return err
							}
							sum += v
						}
						return nil
					}, concurrency.WithIsolation(iso.iso), concurrency.WithAbortContext(ctx))
					if err == nil && sum != accounts*balance {
						err = fmt.Errorf("a reader saw a total of %d", sum)
					}
					if err != nil {
						errs <- err
						return
					}
					reads++
				}
			}()
			wg.Wait()
			close(stop)
			<-readerDone
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			r := must(cli.Get(ctx, pfx, clientv3.WithPrefix()))(t)
			total := 0
			for _, kv := range r.Kvs {
				v, _ := strconv.Atoi(string(kv.Value))
				if v < 0 {
					t.Fatalf("%s = %d", kv.Key, v)
				}
				total += v
			}
			if len(r.Kvs) != accounts || total != accounts*balance {
				t.Fatalf("%d accounts hold %d, want %d", len(r.Kvs), total, accounts*balance)
			}
			t.Logf("%d transfers applied %d times (retries after conflicts); %d consistent reads", workers*transfers, applies.Load(), reads)
		})
	}
}
