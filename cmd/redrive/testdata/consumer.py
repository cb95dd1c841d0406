#!/usr/bin/python3
"""A consumer of a queue that `redrive serve --amqp-queues` manages, written
with pika (Debian's python3-pika), as a team that does not write Go would.

It uses only the broker's own protocol:
  - ack what succeeded;
  - reject (requeue=False) what failed: redrive retries it by the queue's
    policy, through the delay queues;
  - to say why, publish the message to the failure exchange (routing key:
    the queue's name) with the delivered headers plus x-redrive-class,
    x-redrive-error and x-redrive-retry-after, then ack it.

What it does with a message is named by the message id's prefix:
  ok-       ack
  flaky-    reject the first two deliveries, then ack
  dead-     always reject (it ends in the DLQ, retries exhausted)
  bad-      report permanent through the failure exchange (DLQ at once)
  limit-    report rate_limited with Retry-After 0.3 s once, then ack
  revive-   reject until it comes back redriven (x-redrive-redriven), then ack

Every delivery is written as a JSON line to the file named by argv[4]:
{"id", "at" (seconds since the epoch), "action", "body" (hex),
"attempt", "redriven", "content_type", "traceparent"}.

The W3C trace context (traceparent, tracestate headers) the message
carries is read, logged, and sent back on a failure report, so that
redrive's decision joins the trace the message was published in.

With a fifth argument, GATE_FILE, each delivery waits while that file is
absent: a test removes it to hold the consumer mid-stream, with messages
still queued, and creates it again to let it go on.

Usage: consumer.py AMQP_URL QUEUE FAILURE_EXCHANGE LOG_FILE [GATE_FILE]
"""
import json
import os
import sys
import time

import pika

url, queue, exchange, log_path = sys.argv[1:5]
gate = sys.argv[5] if len(sys.argv) > 5 else None
log = open(log_path, "a", buffering=1)
seen = {}


def decide(mid, n, headers):
    if mid.startswith("ok-"):
        return "ack", None
    if mid.startswith("flaky-"):
        return ("reject", None) if n <= 2 else ("ack", None)
    if mid.startswith("dead-"):
        return "reject", None
    if mid.startswith("bad-"):
        return "report", {"x-redrive-class": "permanent", "x-redrive-error": "invalid document: no title",
                          "x-redrive-cause": "no_title"}
    if mid.startswith("limit-"):
        if n == 1:
            return "report", {"x-redrive-class": "rate_limited", "x-redrive-error": "429 Too Many Requests",
                              "x-redrive-retry-after": "0.3"}
        return "ack", None
    if mid.startswith("revive-"):
        return ("ack", None) if int(headers.get("x-redrive-redriven") or 0) > 0 else ("reject", None)
    return "ack", None


def on_message(ch, method, props, body):
    while gate and not os.path.exists(gate):
        time.sleep(0.01)
    mid = props.message_id or ""
    headers = dict(props.headers or {})
    seen[mid] = seen.get(mid, 0) + 1
    action, report = decide(mid, seen[mid], headers)
    traceparent, tracestate = headers.get("traceparent"), headers.get("tracestate")
    log.write(json.dumps({"id": mid, "at": time.time(), "action": action, "body": body.hex(),
                          "attempt": headers.get("x-redrive-attempt"), "redriven": headers.get("x-redrive-redriven"),
                          "content_type": props.content_type, "traceparent": traceparent}) + "\n")
    if action == "ack":
        ch.basic_ack(method.delivery_tag)
    elif action == "reject":
        ch.basic_reject(method.delivery_tag, requeue=False)
    else:
        headers.update(report)
        if traceparent:  # the report keeps the message's trace
            headers["traceparent"] = traceparent
            if tracestate:
                headers["tracestate"] = tracestate
        ch.basic_publish(exchange, queue, body, pika.BasicProperties(
            headers=headers, message_id=props.message_id, content_type=props.content_type,
            delivery_mode=2), mandatory=True)
        ch.basic_ack(method.delivery_tag)


while True:
    try:
        conn = pika.BlockingConnection(pika.URLParameters(url))
        ch = conn.channel()
        ch.confirm_delivery()  # reports are published with confirms
        ch.basic_qos(prefetch_count=10)
        ch.basic_consume(queue, on_message)
        print("consuming", queue, flush=True)
        ch.start_consuming()
    except pika.exceptions.AMQPError as e:
        # The queue may not be declared yet (serve declares it), or the
        # broker restarted (the connection lost, or the channel closed
        # under an ack): try again.
        print("retrying:", repr(e), flush=True)
        time.sleep(0.2)
