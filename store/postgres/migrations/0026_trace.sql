-- redrive PostgreSQL schema: the trace context of a job's enqueue.
--
-- trace is the W3C trace context (traceparent, then a space and the
-- tracestate when there is one) of the span that enqueued the job, so
-- that every attempt, a retry hours later or a redrive a week later,
-- joins that trace. NULL: the job was enqueued outside any trace. Stores
-- write it once, at the insert, and never change it. A nullable column
-- without a default rewrites no row.
ALTER TABLE jobs ADD COLUMN trace text;
