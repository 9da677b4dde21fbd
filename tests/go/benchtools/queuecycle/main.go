// queuecycle: one synchronous worker through Go's clientv3 (issue #37 item 1),
// the Go twin of bench/queue_cycle.py's Python loop, so the client's own cost
// is small next to the servers'.
//
//	queuecycle -endpoint 127.0.0.1:2379 -queue   # etcdq: produce, delivery, ack
//	queuecycle -endpoint 127.0.0.1:2379          # etcd: put, watch event, delete
//
// Queue mode: Put /q/{q}/p/m{i}, wait for the delivery on the consumer's Watch
// of /q/{q}/c/{uuid}, Delete the delivered key (QUEUES.md). Plain mode: Put
// /cycle{tag}/m{i}, wait for its PUT event on a Watch of the prefix, Delete it.
// One client, one step in flight. Prints one JSON line: cycles/s and the cycle
// and step durations' percentiles in milliseconds (-durations: every cycle's, µs).
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

func pct(xs []time.Duration, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), xs...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(p / 100 * float64(len(s)-1))
	return float64(s[i].Microseconds()) / 1000
}

func tag() string {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

func main() {
	endpoint := flag.String("endpoint", "127.0.0.1:2379", "client URL (host:port) of the member to talk to")
	isQueue := flag.Bool("queue", false, "run the etcdq queue cycle instead of etcd's plain-key cycle")
	seconds := flag.Float64("seconds", 5, "how long to run, seconds")
	payload := flag.Int("payload", 256, "value size, bytes")
	durations := flag.Bool("durations", false, "also print every cycle's duration (durations_us)")
	noBDP := flag.Bool("no-bdp", false, "fixed HTTP/2 windows (turns off gRPC-Go's BDP pings)")
	flag.Parse()

	cfg := clientv3.Config{Endpoints: []string{*endpoint}, DialTimeout: 5 * time.Second}
	if *noBDP {
		cfg.DialOptions = []grpc.DialOption{grpc.WithInitialWindowSize(1 << 20), grpc.WithInitialConnWindowSize(1 << 20)}
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "queuecycle:", err)
		os.Exit(1)
	}
	defer cli.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	t := tag()
	var watchKey string
	var opts []clientv3.OpOption
	var putKey func(i int) string
	if *isQueue {
		q := "cycle" + t[:8]
		watchKey = fmt.Sprintf("/q/%s/c/%s", q, t)
		putKey = func(i int) string { return fmt.Sprintf("/q/%s/p/m%d", q, i) }
	} else {
		watchKey = "/cycle" + t[:8] + "/"
		opts = append(opts, clientv3.WithPrefix())
		putKey = func(i int) string { return fmt.Sprintf("%sm%d", watchKey, i) }
	}
	wch := cli.Watch(clientv3.WithRequireLeader(ctx), watchKey, append(opts, clientv3.WithCreatedNotify())...)
	if r := <-wch; !r.Created {
		fmt.Fprintln(os.Stderr, "queuecycle: watch not created:", r.Err())
		os.Exit(1)
	}
	var pending []string // keys put on the watch but not taken yet
	nextPut := func() string {
		for len(pending) == 0 {
			select {
			case r, ok := <-wch:
				if !ok || r.Canceled {
					fmt.Fprintln(os.Stderr, "queuecycle: watch ended:", r.Err())
					os.Exit(1)
				}
				for _, ev := range r.Events {
					if ev.Type == clientv3.EventTypePut {
						pending = append(pending, string(ev.Kv.Key))
					}
				}
			case <-time.After(10 * time.Second):
				fmt.Fprintln(os.Stderr, "queuecycle: no delivery within 10 s")
				os.Exit(1)
			}
		}
		k := pending[0]
		pending = pending[1:]
		return k
	}
	value := string(make([]byte, *payload))
	cycle := func(i int) (put, event, del time.Duration) {
		t0 := time.Now()
		if _, err := cli.Put(ctx, putKey(i), value); err != nil {
			fmt.Fprintln(os.Stderr, "queuecycle: put:", err)
			os.Exit(1)
		}
		t1 := time.Now()
		k := nextPut()
		t2 := time.Now()
		if _, err := cli.Delete(ctx, k); err != nil {
			fmt.Fprintln(os.Stderr, "queuecycle: delete:", err)
			os.Exit(1)
		}
		return t1.Sub(t0), t2.Sub(t1), time.Since(t2)
	}
	i := 0
	for ; i < 20; i++ { // warm the connection and the server
		cycle(i)
	}
	var total, puts, events, dels []time.Duration
	start := time.Now()
	end := start.Add(time.Duration(*seconds * float64(time.Second)))
	for time.Now().Before(end) {
		p, e, d := cycle(i)
		i++
		total = append(total, p+e+d)
		puts, events, dels = append(puts, p), append(events, e), append(dels, d)
	}
	elapsed := time.Since(start).Seconds()
	out := map[string]any{
		"cycles_per_s": float64(len(total)) / elapsed, "cycles": len(total),
		"p50_ms": pct(total, 50), "p99_ms": pct(total, 99),
		"put_p50_ms": pct(puts, 50), "event_p50_ms": pct(events, 50), "delete_p50_ms": pct(dels, 50),
	}
	if *durations {
		us := make([]int64, len(total))
		for j, d := range total {
			us[j] = d.Microseconds()
		}
		out["durations_us"] = us
	}
	b, _ := json.Marshal(out)
	fmt.Println(string(b))
}
