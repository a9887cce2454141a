// A JetStream publish load generator in Go on nats.go, standing in for `nats bench --js --pub` (natscli is
// not packaged in Debian; nats.go is: golang-github-nats-io-go-nats-dev). It shows what nats-server takes
// from a compiled client, beside the nats-py figures of bench/peers/nats_jetstream.py.
//
//	nats_js_pub -url nats://127.0.0.1:4222 -msgs 1000000 -size 100 -subjects 1 -window 1000
//
// Creates the stream BENCH (subjects bench.*, file storage) if missing, publishes -msgs messages of -size
// bytes round robin over bench.0 .. bench.<subjects-1> with at most -window unacknowledged, waits for every
// ack, and prints one JSON line: {"msgs": N, "seconds": S, "errors": E}.
package main

import (
	"crypto/rand"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"
)

func main() {
	url := flag.String("url", nats.DefaultURL, "server URL")
	msgs := flag.Int("msgs", 1000000, "messages to publish")
	size := flag.Int("size", 100, "message size in bytes")
	subjects := flag.Int("subjects", 1, "subjects (partitions) bench.0 .. bench.N-1")
	window := flag.Int("window", 1000, "unacknowledged publishes at most")
	flag.Parse()
	if *msgs < 1 || *size < 1 || *subjects < 1 || *window < 1 {
		fail(fmt.Errorf("-msgs, -size, -subjects and -window must be positive"))
	}
	nc, err := nats.Connect(*url, nats.Timeout(5*time.Second), nats.MaxReconnects(0))
	if err != nil {
		fail(err)
	}
	defer nc.Close()
	js, err := nc.JetStream(nats.PublishAsyncMaxPending(*window))
	if err != nil {
		fail(err)
	}
	if _, err := js.StreamInfo("BENCH"); err != nil {
		cfg := &nats.StreamConfig{Name: "BENCH", Subjects: []string{"bench.*"}, Storage: nats.FileStorage}
		if _, err := js.AddStream(cfg); err != nil {
			fail(err)
		}
	}
	names := make([]string, *subjects)
	for i := range names {
		names[i] = fmt.Sprintf("bench.%d", i)
	}
	value := make([]byte, *size)
	if _, err := rand.Read(value); err != nil {
		fail(err)
	}
	futures := make([]nats.PubAckFuture, 0, *msgs)
	start := time.Now()
	for i := 0; i < *msgs; i++ {
		f, err := js.PublishAsync(names[i%*subjects], value)
		if err != nil {
			fail(err)
		}
		futures = append(futures, f)
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(10 * time.Minute):
		fail(fmt.Errorf("acks still pending after 10 minutes"))
	}
	elapsed := time.Since(start).Seconds()
	errors := 0
	for _, f := range futures {
		select {
		case <-f.Ok():
		case <-f.Err():
			errors++
		}
	}
	out, _ := json.Marshal(map[string]any{"msgs": *msgs, "seconds": elapsed, "errors": errors})
	fmt.Println(string(out))
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "nats_js_pub:", err)
	os.Exit(1)
}
