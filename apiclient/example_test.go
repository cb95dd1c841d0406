package apiclient_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/redrivehq/redrive/apiclient"
)

func ExampleNew() {
	c, err := apiclient.New("http://127.0.0.1:8080",
		apiclient.WithToken(os.Getenv("REDRIVE_TOKEN")),
		apiclient.WithTimeout(30*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	j, err := c.Enqueue(ctx, apiclient.EnqueueRequest{Kind: "email", Queue: "mail",
		Payload: json.RawMessage(`{"to":"ada@example.com"}`), IdempotencyKey: "welcome-ada"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("enqueued job", j.ID)
}

func ExampleError() {
	c, err := apiclient.New("http://127.0.0.1:8080")
	if err != nil {
		log.Fatal(err)
	}
	_, err = c.Enqueue(context.Background(), apiclient.EnqueueRequest{Kind: "email", Delay: "soon"})
	if e, ok := errors.AsType[*apiclient.Error](err); ok && e.StatusCode == http.StatusBadRequest {
		// e.Code is "invalid", e.Field "delay".
		fmt.Printf("fix %s: %s\n", e.Field, e.Message)
	}
}

func ExampleClient_DeadJobs() {
	c, err := apiclient.New("http://127.0.0.1:8080")
	if err != nil {
		log.Fatal(err)
	}
	// Every dead job of the queue mail since yesterday, page after page.
	q := apiclient.JobQuery{FilterBody: apiclient.FilterBody{Queue: "mail", Since: "24h"}, Limit: 500}
	for j, err := range c.DeadJobs(context.Background(), q) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(j.ID, j.LastError)
	}
}

func ExampleClient_Follow() {
	c, err := apiclient.New("http://127.0.0.1:8080")
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	op, err := c.StartRedrive(ctx, apiclient.RedriveBody{Filter: &apiclient.FilterBody{Queue: "mail", Class: "transient"}, Rate: 50})
	if err != nil {
		log.Fatal(err)
	}
	final, err := c.Follow(ctx, op, apiclient.FollowOptions{
		CancelOnStop: true, // when ctx ends first, cancel it on the server
		Report: func(o apiclient.Operation) {
			fmt.Printf("%d/%d\n", o.Processed, o.Matched)
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(final.State, final.Redriven, "redriven")
}

func ExampleClient_ExportDead() {
	c, err := apiclient.New("http://127.0.0.1:8080")
	if err != nil {
		log.Fatal(err)
	}
	s, err := c.ExportDead(context.Background(), apiclient.FilterBody{Queue: "mail"})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	for {
		line, err := s.Next()
		if err != nil {
			break // io.EOF at the end
		}
		fmt.Println(line.Job.ID, line.Error.Fingerprint)
	}
}
