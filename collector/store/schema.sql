-- toolmeter's store: the contract between the collector (writer) and the dashboard and
-- CLI (readers). Created on first use; every statement is idempotent.
-- Times: *_ns are Unix nanoseconds as in OTLP; *_time the same instant as a UTC TIMESTAMP.

-- Keys: a tool call, model call or payload is identified by (trace_id, span_id[, kind]), a
-- message view or a tool name by (trace_id, tool_call_id), and a write skips the ones stored
-- already by comparing with the stored rows near its own in time (collector/store/insertion.py),
-- not through a PRIMARY KEY: DuckDB rewrites a table's whole key index at every checkpoint, so
-- with random trace ids each write cost more the more the store held, and the index took more
-- room than the rows. Files made before this kept their keys (and work as before) until
-- `toolmeter prune --compact` rewrites them.

-- One row per tool call.
CREATE TABLE IF NOT EXISTS tool_calls (
    trace_id            VARCHAR NOT NULL,   -- 32 hex characters
    span_id             VARCHAR NOT NULL,   -- 16 hex characters
    parent_span_id      VARCHAR,
    tool_call_id        VARCHAR,            -- the id the model gave the call
    tool_name           VARCHAR NOT NULL,
    service_name        VARCHAR,
    agent_name          VARCHAR,
    dialect             VARCHAR,            -- gen_ai | openinference | traceloop | toolmeter
    source              VARCHAR,            -- 'process', or the file it was ingested from
    start_ns            BIGINT,
    end_ns              BIGINT,
    start_time          TIMESTAMP,
    duration_ms         DOUBLE,
    status              VARCHAR,            -- ok | error | unset
    error               VARCHAR,
    encoding            VARCHAR,            -- tiktoken encoding of the token counts
    raw_bytes           BIGINT,             -- UTF-8 bytes the tool produced
    raw_tokens          BIGINT,
    raw_tokens_exact    BOOLEAN,
    view_bytes          BIGINT,             -- UTF-8 bytes the model was shown
    view_tokens         BIGINT,
    view_tokens_exact   BOOLEAN,
    view_source         VARCHAR,            -- view | message (an LLM call's input) | declared | retained | raw (no view: the model saw the raw)
    budget_tokens       BIGINT,
    over_budget         BOOLEAN,            -- raw_tokens > budget_tokens
    view_over_budget    BOOLEAN,            -- view_tokens > budget_tokens: the budget did not hold
    truncated           BOOLEAN,
    truncation_source   VARCHAR,            -- declared | inferred
    truncation_kind     VARCHAR,            -- head | tail | head_tail | middle | ranges | rewritten | unknown
    retained_ranges     BIGINT[][],         -- [[start, end), ...] byte ranges of the raw
    retained_source     VARCHAR,            -- declared | inferred
    retained_bytes      BIGINT,
    omitted_bytes       BIGINT,
    shape               VARCHAR,            -- list | record | document | diagnostic
    shape_source        VARCHAR,
    schema_fingerprint  VARCHAR,            -- sha256 prefix of the JSON key paths and types
    schema_fields       VARCHAR[],          -- 'path:type' entries the fingerprint was computed from
    arguments           VARCHAR,
    warnings            VARCHAR[],
    redactions          INTEGER,            -- secrets masked in the stored payloads and arguments
    later_llm_calls     BIGINT,             -- LLM calls of the trace that started after this call ended
                                            -- (kept up to date at every write; window cost = view_tokens x this)
    retained_coverage   DOUBLE,             -- bytes of the view that are retained raw bytes / view bytes
    raw_wrapper         VARCHAR,            -- framework envelope removed from the result (collector/wrappers.py)
    wrapper_bytes       BIGINT,             -- bytes the envelope added around the raw result
    wrapper_tokens      BIGINT,             -- tokens the envelope added
    view_join           VARCHAR,            -- how a message view was matched: call_id | order_content | order
    origin              VARCHAR,            -- span | log | messages (derived from an LLM call's input)
    token_counter       VARCHAR,            -- who counted the tokens, with its version: 'quicktok 0.4.0' | 'tiktoken 0.14.0'
    handle              VARCHAR,            -- where the adapter keeps the full result (collector.adapter)
    items_total         BIGINT,             -- items of a list result (declared)
    items_shown         BIGINT,             -- items of it the view shows (declared)
    retained_items      BIGINT[][]          -- [[start, end), ...] index ranges of the items shown
);
ALTER TABLE tool_calls ADD COLUMN IF NOT EXISTS retained_coverage DOUBLE;
-- kept up to date at every write with later_llm_calls (collector/store/windowcost.py):
ALTER TABLE tool_calls ADD COLUMN IF NOT EXISTS cached_reads BIGINT;      -- of the later reads, served from the prompt cache (NULL: no cache figures)
ALTER TABLE tool_calls ADD COLUMN IF NOT EXISTS cache_written BOOLEAN;    -- the first call that read it wrote the prompt cache
ALTER TABLE tool_calls ADD COLUMN IF NOT EXISTS cleared_at_ns BIGINT;     -- start of the first later call whose input left it out
ALTER TABLE tool_calls ADD COLUMN IF NOT EXISTS cleared_by VARCHAR;       -- context_edit | compaction
ALTER TABLE tool_calls ADD COLUMN IF NOT EXISTS read_by_model VARCHAR;    -- the model of the first call that read it
ALTER TABLE tool_calls ADD COLUMN IF NOT EXISTS raw_wrapper VARCHAR;
ALTER TABLE tool_calls ADD COLUMN IF NOT EXISTS wrapper_bytes BIGINT;
ALTER TABLE tool_calls ADD COLUMN IF NOT EXISTS wrapper_tokens BIGINT;
ALTER TABLE tool_calls ADD COLUMN IF NOT EXISTS view_join VARCHAR;
ALTER TABLE tool_calls ADD COLUMN IF NOT EXISTS origin VARCHAR;
ALTER TABLE tool_calls ADD COLUMN IF NOT EXISTS token_counter VARCHAR;
ALTER TABLE tool_calls ADD COLUMN IF NOT EXISTS handle VARCHAR;
ALTER TABLE tool_calls ADD COLUMN IF NOT EXISTS items_total BIGINT;
ALTER TABLE tool_calls ADD COLUMN IF NOT EXISTS items_shown BIGINT;
ALTER TABLE tool_calls ADD COLUMN IF NOT EXISTS retained_items BIGINT[][];

-- One row per model call, kept lightly for window cost and replay.
CREATE TABLE IF NOT EXISTS llm_calls (
    trace_id        VARCHAR NOT NULL,
    span_id         VARCHAR NOT NULL,
    parent_span_id  VARCHAR,
    service_name    VARCHAR,
    dialect         VARCHAR,
    source          VARCHAR,
    start_ns        BIGINT,
    end_ns          BIGINT,
    start_time      TIMESTAMP,
    model           VARCHAR,
    input_tokens    BIGINT,             -- every input token, cached ones included
    output_tokens   BIGINT
);
ALTER TABLE llm_calls ADD COLUMN IF NOT EXISTS cache_read_tokens BIGINT;     -- served from the prompt cache
ALTER TABLE llm_calls ADD COLUMN IF NOT EXISTS cache_write_tokens BIGINT;    -- written to the prompt cache
ALTER TABLE llm_calls ADD COLUMN IF NOT EXISTS cleared_tool_uses BIGINT;     -- oldest tool results left out of its input
ALTER TABLE llm_calls ADD COLUMN IF NOT EXISTS cleared_input_tokens BIGINT;
ALTER TABLE llm_calls ADD COLUMN IF NOT EXISTS compacted BOOLEAN;            -- the span says: compacted before this call
ALTER TABLE llm_calls ADD COLUMN IF NOT EXISTS compaction_parts BIGINT;      -- compaction parts in its input messages

-- Payloads for replay. Small ones (16 KiB or less) are kept inline; larger ones live in files
-- beside the store (<store>.payloads/, see collector/payload_store.py) and this table says
-- which blob belongs to which call. Up to the
-- cap a payload is stored whole (tail_bytes = 0); beyond it, its first head_bytes and last
-- tail_bytes are kept, with the total size and the sha256 of the whole, and cut = true.
CREATE TABLE IF NOT EXISTS payloads (
    trace_id     VARCHAR NOT NULL,
    span_id      VARCHAR NOT NULL,
    kind         VARCHAR NOT NULL,   -- raw | view
    total_bytes  BIGINT,
    sha256       VARCHAR,            -- of the whole payload
    cut          BOOLEAN,
    head_bytes   BIGINT,             -- the blob holds bytes [0, head_bytes) ...
    tail_bytes   BIGINT,             -- ... then [total_bytes - tail_bytes, total_bytes)
    blob_id      VARCHAR,            -- sha256 of the stored bytes: the file name (NULL when inline)
    inline       BLOB,               -- the stored bytes themselves, when at most 16 KiB (as inline_codec says)
    start_ns     BIGINT,             -- the call's start: a write checks only payloads near its own for repeats
    same_as      VARCHAR,            -- 'raw': a view byte for byte its call's raw result, whose bytes are not stored twice
    inline_codec VARCHAR             -- 'zstd': inline holds the bytes compressed; NULL: as they are
);
ALTER TABLE payloads ADD COLUMN IF NOT EXISTS start_ns BIGINT;
ALTER TABLE payloads ADD COLUMN IF NOT EXISTS same_as VARCHAR;
ALTER TABLE payloads ADD COLUMN IF NOT EXISTS inline_codec VARCHAR;

-- The collector's own counters: one row per collector, updated at every flush.
CREATE TABLE IF NOT EXISTS collector_stats (
    collector_id        VARCHAR PRIMARY KEY,
    host                VARCHAR,
    pid                 BIGINT,
    started_at          TIMESTAMP,
    updated_at          TIMESTAMP,
    spans_seen          BIGINT,   -- tool and LLM spans offered to the queue
    queued              BIGINT,   -- waiting at the last flush
    tool_calls_written  BIGINT,
    llm_calls_written   BIGINT,
    dropped             BIGINT,   -- refused because the queue was full
    failed              BIGINT,   -- could not be read or measured (see ingest_issues)
    duplicates          BIGINT,   -- already in the store (same trace and span id)
    refused             BIGINT,   -- receiver requests answered 503, queue full (clients retry)
    metric_requests     BIGINT    -- OTLP /v1/metrics requests answered and discarded
);
ALTER TABLE collector_stats ADD COLUMN IF NOT EXISTS metric_requests BIGINT;

-- Problems met while reading spans: which source, which span, which field, what to do.
CREATE TABLE IF NOT EXISTS ingest_issues (
    logged_at     TIMESTAMP,
    collector_id  VARCHAR,
    level         VARCHAR,   -- warning | error
    source        VARCHAR,
    trace_id      VARCHAR,
    span_id       VARCHAR,
    field         VARCHAR,
    message       VARCHAR
);

-- How far each receiver's spool has been written into this store (see collector/spool.py).
-- Updated in the same transaction as the rows, so a restart replays exactly what is missing.
CREATE TABLE IF NOT EXISTS receiver_progress (
    receiver_id  VARCHAR PRIMARY KEY,   -- the spool folder
    segment      BIGINT,
    "offset"     BIGINT,
    updated_at   TIMESTAMP
);

-- Tool responses as LLM calls' input messages carried them (what the model was shown), one
-- per (trace, tool call id); joined to tool_calls to give their view. See collector/messages.py.
CREATE TABLE IF NOT EXISTS message_views (
    trace_id      VARCHAR NOT NULL,
    tool_call_id  VARCHAR NOT NULL,
    llm_span_id   VARCHAR,            -- the first LLM call that carried it
    bytes         BIGINT,
    tokens        BIGINT,             -- counted here only in numbers-only stores (no blob)
    blob_id       VARCHAR,            -- the text, in the payload store
    inline        BLOB,               -- the text itself (DuckLake stores keep no payload files)
    tool_name     VARCHAR,            -- the tool the model called, from its earlier tool call
    position      INTEGER,            -- order among the tool responses of that input
    llm_start_ns  BIGINT,             -- when the LLM call that carried it started
    service_name  VARCHAR,
    dialect       VARCHAR
);
ALTER TABLE message_views ADD COLUMN IF NOT EXISTS inline BLOB;
ALTER TABLE message_views ADD COLUMN IF NOT EXISTS tool_name VARCHAR;
ALTER TABLE message_views ADD COLUMN IF NOT EXISTS position INTEGER;
ALTER TABLE message_views ADD COLUMN IF NOT EXISTS llm_start_ns BIGINT;
ALTER TABLE message_views ADD COLUMN IF NOT EXISTS service_name VARCHAR;
ALTER TABLE message_views ADD COLUMN IF NOT EXISTS dialect VARCHAR;

-- The tool a model call asked for, by call id, kept when the response to it was not in the
-- same batch: log records of one model call can reach the store in different batches, and
-- a response whose message carries no name (the GenAI tool message) is named from here.
CREATE TABLE IF NOT EXISTS tool_call_names (
    trace_id      VARCHAR NOT NULL,
    tool_call_id  VARCHAR NOT NULL,
    tool_name     VARCHAR NOT NULL,
    asked_ns      BIGINT              -- when the model call whose messages named it started
);

-- Batches committed to a DuckLake store, one row each, written in the batch's own
-- transaction: a writer that retries a commit whose outcome it could not see (the catalog
-- went away mid-commit) finds the id here and writes nothing twice. Unused by DuckDB files.
CREATE TABLE IF NOT EXISTS committed_batches (
    batch_id      VARCHAR,
    collector_id  VARCHAR,
    committed_at  TIMESTAMP,
    tool_calls    BIGINT,
    llm_calls     BIGINT
);

-- Envelope-growth alerts (collector/alerts.py) with their evidence, and their delivery.
CREATE TABLE IF NOT EXISTS alerts (
    alert_id        VARCHAR PRIMARY KEY,   -- stable: the same finding is one alert, however often evaluated
    tool_name       VARCHAR NOT NULL,
    kind            VARCHAR NOT NULL,      -- schema_change | growth (no schema change) | run_growth
    state           VARCHAR NOT NULL,      -- open | acknowledged | resolved
    detected_at     TIMESTAMP,             -- when toolmeter found it
    change_at       TIMESTAMP,             -- when the envelope (or the schema) changed
    metric          VARCHAR,               -- the rule that fired first, e.g. view_tokens_p99
    before_value    DOUBLE,
    after_value     DOUBLE,
    ratio           DOUBLE,
    summary         VARCHAR,               -- one line for people (and Slack's text field)
    evidence        JSON,                  -- windows, counts, percentiles before/after, schema diff, example calls
    delivered_at    TIMESTAMP,             -- webhook delivery (at most once per alert)
    delivery_attempts INTEGER DEFAULT 0,
    delivery_error  VARCHAR                -- last delivery failure, shown until delivered
);
ALTER TABLE alerts ADD COLUMN IF NOT EXISTS service_name VARCHAR;  -- run_growth: the service whose runs grew

-- One row per retention run (collector/store/retention.py): what it removed, so a missing
-- payload can be told apart from one that was never stored.
CREATE TABLE IF NOT EXISTS retention_runs (
    pruned_at        TIMESTAMP,
    rows_before      TIMESTAMP,          -- rows of calls that started before this were removed
    payloads_before  TIMESTAMP,          -- payloads of calls that started before this were removed
    capped           BOOLEAN,            -- the size cap removed more than the retentions did
    removed          JSON,               -- rows removed per table
    size_after       BIGINT              -- bytes the store used afterwards (NULL on a lake)
);

-- Daily rollups (collector/store/rollup.py): exact counts, sums and maxima, and log-bucket
-- histograms of the sizes (percentiles within 1 %), per closed UTC day, tool, service, encoding.
CREATE TABLE IF NOT EXISTS rollup_days (
    day        DATE,                      -- a day whose rollup is complete
    rolled_at  TIMESTAMP,
    roll_id    VARCHAR                    -- the run that rolled it: on a lake two writers may both roll a day,
                                          -- and queries read one roll per day (the least roll_id)
);
CREATE TABLE IF NOT EXISTS tool_day_stats (
    day             DATE,
    roll_id         VARCHAR,
    tool_name       VARCHAR,
    service_name    VARCHAR,
    encoding        VARCHAR,
    calls           BIGINT,
    errors          BIGINT,
    truncated       BIGINT,
    over_known      BIGINT,               -- calls with a budget (raw over budget known)
    over_yes        BIGINT,
    view_over_known BIGINT,
    view_over_yes   BIGINT,
    budget_max      BIGINT,
    view_tokens_max BIGINT,
    raw_tokens_max  BIGINT,
    raw_bytes_max   BIGINT,
    view_bytes_max  BIGINT,
    raw_bytes_sum   HUGEINT,
    window_cost     HUGEINT
);
CREATE TABLE IF NOT EXISTS tool_day_buckets (
    day           DATE,
    roll_id       VARCHAR,
    tool_name     VARCHAR,
    service_name  VARCHAR,
    encoding      VARCHAR,
    metric        VARCHAR,                -- view_tokens | raw_tokens | raw_bytes | view_bytes
    bucket        INTEGER,                -- 0: size 0; k >= 1: sizes in (G^(k-2), G^(k-1)]
    calls         BIGINT
);
CREATE TABLE IF NOT EXISTS tool_month_buckets (  -- the day histograms of a closed month, merged
    month         DATE,                   -- its first day
    roll_id       VARCHAR,
    tool_name     VARCHAR,
    service_name  VARCHAR,
    encoding      VARCHAR,
    metric        VARCHAR,
    bucket        INTEGER,
    calls         BIGINT
);
