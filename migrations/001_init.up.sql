-- MaxQ schema: the tables of the specification (§8) plus what the engine
-- needs to run them. Times are epoch milliseconds, IDs are UUID strings
-- (v7, time-ordered), JSON is JSONB.

-- worker: one row per live worker process. A worker renews its own row only,
-- so heartbeats cost one statement per interval however many scripts it runs.
CREATE TABLE worker (
    id           TEXT PRIMARY KEY,
    host         TEXT NOT NULL,
    pid          INTEGER NOT NULL,
    started_at   BIGINT NOT NULL,
    heartbeat_at BIGINT NOT NULL
);

CREATE TABLE run (
    id              TEXT PRIMARY KEY,
    flow_name       TEXT NOT NULL,
    status          TEXT NOT NULL,
    input           JSONB,
    output          JSONB,
    error           JSONB,
    metadata        JSONB,
    created_at      BIGINT NOT NULL,
    started_at      BIGINT,
    completed_at    BIGINT,
    duration_ms     BIGINT,
    -- Engine columns.
    -- idempotency_key: a trigger repeated with the same key returns this run.
    idempotency_key TEXT,
    -- flow_ready: a flow call of this run is pending and none is running, so
    -- a worker may claim one. Kept on the run row so that the claim's row
    -- lock serializes the calls of one run: never two flow.sh of a run at once.
    flow_ready      BOOLEAN NOT NULL DEFAULT false,
    flow_ready_at   BIGINT,
    CONSTRAINT run_status_valid CHECK (status IN ('pending', 'running', 'completed', 'failed', 'cancelled')),
    CONSTRAINT run_completed_at_iff_terminal CHECK ((completed_at IS NOT NULL) = (status IN ('completed', 'failed', 'cancelled'))),
    CONSTRAINT run_flow_ready_at_iff_ready CHECK ((flow_ready_at IS NOT NULL) = flow_ready)
);

CREATE INDEX idx_run_flow_name ON run (flow_name);
CREATE INDEX idx_run_status ON run (status);
CREATE INDEX idx_run_created_at ON run (created_at DESC);
CREATE UNIQUE INDEX idx_run_idempotency_key ON run (flow_name, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX idx_run_flow_ready ON run (flow_ready_at) WHERE flow_ready;

CREATE TABLE stage (
    id           TEXT PRIMARY KEY,
    run_id       TEXT NOT NULL REFERENCES run (id) ON DELETE CASCADE,
    name         TEXT NOT NULL,
    final        BOOLEAN NOT NULL,
    status       TEXT NOT NULL,
    created_at   BIGINT NOT NULL,
    completed_at BIGINT,
    -- steps_left counts the stage's steps not yet in a terminal state. The
    -- transition that brings it to zero settles the stage's callback.
    steps_left   INTEGER NOT NULL,
    CONSTRAINT stage_status_valid CHECK (status IN ('running', 'completed', 'failed', 'cancelled')),
    CONSTRAINT stage_steps_left_nonnegative CHECK (steps_left >= 0)
);

CREATE INDEX idx_stage_run_id ON stage (run_id);
CREATE UNIQUE INDEX idx_stage_run_name ON stage (run_id, name);

CREATE TABLE step (
    id           TEXT PRIMARY KEY,
    run_id       TEXT NOT NULL REFERENCES run (id) ON DELETE CASCADE,
    stage_id     TEXT NOT NULL REFERENCES stage (id) ON DELETE CASCADE,
    name         TEXT NOT NULL,
    sequence     INTEGER NOT NULL,
    status       TEXT NOT NULL,
    depends_on   JSONB NOT NULL,
    retry_count  INTEGER NOT NULL DEFAULT 0,
    max_retries  INTEGER NOT NULL,
    env          JSONB,
    output       JSONB,
    error        JSONB,
    created_at   BIGINT NOT NULL,
    started_at   BIGINT,
    completed_at BIGINT,
    duration_ms  BIGINT,
    -- Engine columns.
    -- instances: how many instances of this name the stage scheduled.
    instances    INTEGER NOT NULL,
    -- deps_left: instances of dependencies not yet completed. A step is
    -- claimable when pending, deps_left = 0 and ready_at has passed.
    deps_left    INTEGER NOT NULL,
    ready_at     BIGINT NOT NULL,
    -- attempt: incremented by each claim; the fencing token a worker's
    -- result must carry to be accepted.
    attempt      INTEGER NOT NULL DEFAULT 0,
    worker_id    TEXT,
    timeout_ms   BIGINT,
    deadline_at  BIGINT,
    exit_code    INTEGER,
    CONSTRAINT step_status_valid CHECK (status IN ('pending', 'running', 'completed', 'failed', 'cancelled')),
    CONSTRAINT step_completed_at_iff_terminal CHECK ((completed_at IS NOT NULL) = (status IN ('completed', 'failed', 'cancelled'))),
    CONSTRAINT step_deps_left_nonnegative CHECK (deps_left >= 0),
    CONSTRAINT step_retry_count_bounded CHECK (retry_count >= 0 AND retry_count <= max_retries)
);

CREATE INDEX idx_step_run_id ON step (run_id);
CREATE INDEX idx_step_stage_id ON step (stage_id);
CREATE INDEX idx_step_status ON step (status);
CREATE INDEX idx_step_name ON step (run_id, name);
CREATE UNIQUE INDEX idx_step_run_name_seq ON step (run_id, name, sequence);
-- The claim scans only this index: pending steps whose dependencies are done.
CREATE INDEX idx_step_ready ON step (ready_at) WHERE status = 'pending' AND deps_left = 0;
-- Running steps, for the reaper and for heartbeats per worker.
CREATE INDEX idx_step_running ON step (worker_id) WHERE status = 'running';

-- flow_call: one row per call of a run's flow.sh.
CREATE TABLE flow_call (
    id              TEXT PRIMARY KEY,
    run_id          TEXT NOT NULL REFERENCES run (id) ON DELETE CASCADE,
    completed_stage TEXT,
    failed_stage    TEXT,
    status          TEXT NOT NULL,
    attempt         INTEGER NOT NULL DEFAULT 0,
    worker_id       TEXT,
    exit_code       INTEGER,
    error           JSONB,
    created_at      BIGINT NOT NULL,
    started_at      BIGINT,
    completed_at    BIGINT,
    CONSTRAINT flow_call_status_valid CHECK (status IN ('pending', 'running', 'completed', 'failed', 'cancelled'))
);

CREATE INDEX idx_flow_call_run_id ON flow_call (run_id, created_at);
-- At most one flow.sh of a run at a time, whatever the workers do.
CREATE UNIQUE INDEX idx_flow_call_one_running ON flow_call (run_id) WHERE status = 'running';
CREATE INDEX idx_flow_call_running ON flow_call (worker_id) WHERE status = 'running';

CREATE TABLE artifact (
    id         TEXT PRIMARY KEY,
    run_id     TEXT NOT NULL REFERENCES run (id) ON DELETE CASCADE,
    step_id    TEXT NOT NULL REFERENCES step (id) ON DELETE CASCADE,
    step_name  TEXT NOT NULL,
    sequence   INTEGER NOT NULL,
    name       TEXT NOT NULL,
    full_path  TEXT NOT NULL,
    value      JSONB NOT NULL,
    tags       TEXT[],
    metadata   JSONB,
    created_at BIGINT NOT NULL
);

CREATE INDEX idx_artifact_run_id ON artifact (run_id);
CREATE INDEX idx_artifact_step_id ON artifact (step_id);
CREATE INDEX idx_artifact_step_name ON artifact (run_id, step_name);
CREATE INDEX idx_artifact_name ON artifact (run_id, name);
-- Artifacts are immutable: one per full path in a run.
CREATE UNIQUE INDEX idx_artifact_full_path ON artifact (run_id, full_path);
CREATE INDEX idx_artifact_tags ON artifact USING GIN (tags);
CREATE INDEX idx_artifact_created_at ON artifact (created_at DESC);

CREATE TABLE log (
    id           TEXT PRIMARY KEY,
    run_id       TEXT NOT NULL REFERENCES run (id) ON DELETE CASCADE,
    step_id      TEXT REFERENCES step (id) ON DELETE CASCADE,
    level        TEXT NOT NULL,
    message      TEXT NOT NULL,
    data         JSONB,
    created_at   BIGINT NOT NULL,
    -- Engine columns: the flow call that printed the line (step_id is NULL
    -- then), and a cursor that orders lines as they were written.
    flow_call_id TEXT REFERENCES flow_call (id) ON DELETE CASCADE,
    seq          BIGINT GENERATED ALWAYS AS IDENTITY,
    CONSTRAINT log_level_valid CHECK (level IN ('debug', 'info', 'warn', 'error'))
);

CREATE INDEX idx_log_run_id ON log (run_id, seq);
CREATE INDEX idx_log_step_id ON log (step_id, seq);
CREATE INDEX idx_log_created_at ON log (created_at DESC);
