package clientv3test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestClusterBalancerKeepsServingWhenAMemberIsKilled: one client given all
// three members' endpoints; writers and readers run while a member is killed
// (SIGKILL). clientv3's balancer moves every request to the members left:
// reads (retried by the client on Unavailable) never fail, and a write
// fails only if it was on the killed member's connection when it died
// (clientv3 does not resend a write that may have been applied): at most
// one a writer, right at the kill, then every write succeeds.
func TestClusterBalancerKeepsServingWhenAMemberIsKilled(t *testing.T) {
	c := startCluster(t, clusterConfig{size: 3})
	cli := c.client()
	leader, err := c.leader(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var victim *member
	for _, m := range c.members {
		if m != leader {
			victim = m
			break
		}
	}

	type failure struct {
		at  time.Time
		err error
	}
	const writers, readers = 2, 2
	var (
		mu        sync.Mutex
		killedAt  time.Time
		written   = map[string]string{}
		putFails  = map[int][]failure{}
		readFails []error
		afterKill = map[int]int{} // successful writes a writer started after the kill
		reads     int
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key, val := fmt.Sprintf("bal/%d/%d", w, i), fmt.Sprint(i)
				began := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err := cli.Put(ctx, key, val)
				cancel()
				mu.Lock()
				if err != nil {
					putFails[w] = append(putFails[w], failure{time.Now(), err})
				} else {
					written[key] = val
					if !killedAt.IsZero() && began.After(killedAt) {
						afterKill[w]++
					}
				}
				mu.Unlock()
			}
		}()
	}
	for r := 0; r < readers; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var opts []clientv3.OpOption
			if r == 1 {
				opts = append(opts, clientv3.WithSerializable())
			}
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err := cli.Get(ctx, "bal/", append(opts, clientv3.WithPrefix(), clientv3.WithCountOnly())...)
				cancel()
				mu.Lock()
				if err != nil {
					readFails = append(readFails, err)
				} else {
					reads++
				}
				mu.Unlock()
			}
		}()
	}

	// Load on all three members before the kill (round robin: each
	// member has had a third of the requests).
	eventually(t, 30*time.Second, "100 writes and 100 reads before the kill", func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(written) < 100 || reads < 100 {
			return fmt.Errorf("%d writes, %d reads", len(written), reads)
		}
		return nil
	})
	mu.Lock()
	before := len(written)
	mu.Unlock()
	victim.kill(t)
	mu.Lock()
	killedAt = time.Now()
	mu.Unlock()
	t.Logf("killed follower %s after %d writes", victim.name, before)
	// Run on until each writer has done 100 writes started after the kill.
	eventually(t, 60*time.Second, "100 writes a writer after the kill", func() error {
		mu.Lock()
		defer mu.Unlock()
		for w := 0; w < writers; w++ {
			if afterKill[w] < 100 {
				return fmt.Errorf("writer %d: %d", w, afterKill[w])
			}
		}
		return nil
	})
	close(stop)
	wg.Wait()

	if before == 0 {
		t.Fatalf("no write succeeded before the kill")
	}
	for _, err := range readFails {
		t.Errorf("a read failed: %v", err)
	}
	for w, fs := range putFails {
		for _, f := range fs {
			code := status.Code(f.err)
			t.Logf("writer %d: a write failed %v after the kill: %v", w, f.at.Sub(killedAt).Round(time.Millisecond), f.err)
			if code != codes.Unavailable || f.at.Before(killedAt.Add(-time.Second)) || f.at.After(killedAt.Add(2*time.Second)) {
				t.Errorf("writer %d: failure %v (%v after the kill); only Unavailable at the kill is expected", w, f.err, f.at.Sub(killedAt))
			}
		}
		if len(fs) > 1 {
			t.Errorf("writer %d: %d failed writes, at most the one in flight at the kill is expected", w, len(fs))
		}
	}
	// Every acknowledged write is there, read through the members left.
	ctx := ctxT(t, 30*time.Second)
	got := map[string]string{}
	r := must(cli.Get(ctx, "bal/", clientv3.WithPrefix()))(t)
	for _, kv := range r.Kvs {
		got[string(kv.Key)] = string(kv.Value)
	}
	for k, v := range written {
		if got[k] != v {
			t.Fatalf("acknowledged write %s=%s reads back as %q", k, v, got[k])
		}
	}
	t.Logf("%d acknowledged writes, %d reads, all read back", len(written), reads)
}
