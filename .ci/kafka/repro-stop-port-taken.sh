#!/usr/bin/env bash
# kafka-local stop when the broker has exited but its port answers from
# another process (here a python listener): halt waits 30 s, SIGKILLs a
# PID that is no longer the broker, then waits forever. Fixed: it returns
# once the process has exited, and says the port is another process's.
set -u
CTL=$1
KAFKA_LOCAL_STATE=$(mktemp -d)
export KAFKA_LOCAL_STATE KAFKA_LOCAL_PORT=$((20000 + RANDOM % 10000)) KAFKA_LOCAL_CONTROLLER_PORT=$((30000 + RANDOM % 10000))
python3 -c 'import socket,sys,time; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(); time.sleep(300)' "$KAFKA_LOCAL_PORT" &
listener=$!
# a stand-in broker: its command line names kafka.Kafka and the state's properties
setsid python3 -c 'import time; time.sleep(300)' kafka.Kafka "$KAFKA_LOCAL_STATE/server.properties" &
echo $! >"$KAFKA_LOCAL_STATE/kafka.pid"
sleep 1
SECONDS=0
timeout 90 "$CTL" stop; rc=$?
echo "kafka-local stop: exit $rc after $SECONDS s (124: still waiting when timeout killed it)"
kill $listener 2>/dev/null; rm -rf "$KAFKA_LOCAL_STATE"
