// A work-queue worker for etcdq with etcd's Go client (go.etcd.io/etcd/client/v3).
//
//	go run . -endpoints 127.0.0.1:2379 -queue jobs
//
// It registers as a consumer of queue `jobs` by watching /q/jobs/c/{a fresh
// id}; each message arrives on that watch as a PUT event (key
// /q/jobs/{idx}/{tail}, value the payload). The worker handles it, then acks
// by deleting that key. A message it does not ack (handle failed, or the
// worker died) is delivered again after the queue's visibility timeout, to
// this or another worker: handle must be safe to run twice for the same
// message (at least once). Produce with cli.Put(ctx, "/q/jobs/p/anything", payload).
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// handle is the work. Here: print it; replace with yours.
func handle(key, value []byte) error {
	fmt.Printf("handled %s %s\n", key, value)
	return nil
}

func main() {
	endpoints := flag.String("endpoints", "127.0.0.1:2379", "comma-separated member addresses")
	queue := flag.String("queue", "jobs", "queue name")
	max := flag.Int("max", 0, "stop after this many messages (0: run until interrupted)")
	user := flag.String("user", "", "etcd user (auth)")
	password := flag.String("password", "", "its password")
	flag.Parse()

	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   strings.Split(*endpoints, ","),
		DialTimeout: 5 * time.Second,
		Username:    *user,
		Password:    *password,
	})
	if err != nil {
		log.Fatalf("connect: %v", err)
	}
	defer cli.Close()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	id := make([]byte, 8)
	if _, err := rand.Read(id); err != nil {
		log.Fatal(err)
	}
	consumer := "/q/" + *queue + "/c/" + hex.EncodeToString(id)
	// The consumer lives as long as this watch; clientv3 re-creates it on
	// another member if its connection breaks.
	done := 0
	for resp := range cli.Watch(ctx, consumer) {
		if err := resp.Err(); err != nil {
			log.Fatalf("watch: %v", err) // e.g. canceled: the member dropped this consumer
		}
		for _, ev := range resp.Events {
			if ev.Type != clientv3.EventTypePut {
				continue
			}
			if err := handle(ev.Kv.Key, ev.Kv.Value); err != nil {
				log.Printf("failed %s: %v", ev.Kv.Key, err) // not acked: delivered again later
				continue
			}
			if _, err := cli.Delete(ctx, string(ev.Kv.Key)); err != nil { // the ack
				log.Printf("ack %s: %v", ev.Kv.Key, err) // unacked: delivered again later
				continue
			}
			done++
			if *max > 0 && done >= *max {
				return
			}
		}
	}
}
