-- rota's schema: the tables and meaning of migrations/sqlite/0001_init.sql. Times are unix
-- milliseconds; every "now" the store writes or compares comes from the database's clock
-- (rota_now_ms), so that session deadlines hold across hosts whose clocks disagree.
CREATE FUNCTION rota_now_ms() RETURNS BIGINT LANGUAGE sql VOLATILE AS
$$ SELECT (extract(epoch FROM clock_timestamp()) * 1000)::BIGINT $$;

CREATE TABLE rota_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
INSERT INTO rota_meta (key, value) VALUES ('schema', 'rota');

-- One row per agent incarnation. Only the newest unexpired session of a node may write.
CREATE TABLE sessions (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    node       TEXT    NOT NULL,
    started_at BIGINT  NOT NULL,
    deadline   BIGINT  NOT NULL,
    superseded BOOLEAN NOT NULL DEFAULT FALSE
);
CREATE INDEX sessions_node ON sessions (node);

CREATE TABLE nodes (
    node              TEXT PRIMARY KEY,
    session_id        BIGINT  NOT NULL REFERENCES sessions (id),
    state             TEXT    NOT NULL,
    since             BIGINT  NOT NULL,
    process           TEXT,
    pre_cordoned      BOOLEAN NOT NULL DEFAULT FALSE,
    cordoned_by_rota  BOOLEAN NOT NULL DEFAULT FALSE,
    boot_id           TEXT,
    reboot_started_at BIGINT,
    reboot_deadline   BIGINT,
    last_reboot_at    BIGINT,
    queued_at         BIGINT,
    last_result       TEXT
);
CREATE INDEX nodes_queue ON nodes (queued_at, node) WHERE state = 'queued';

-- A row exists only while the slot is held; the keys make a double grant impossible.
CREATE TABLE slots (
    slot        BIGINT PRIMARY KEY,
    holder      TEXT   NOT NULL UNIQUE,
    acquired_at BIGINT NOT NULL
);

CREATE TABLE requests (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    node        TEXT   NOT NULL,
    process     TEXT   NOT NULL,
    source      TEXT   NOT NULL,
    created_at  BIGINT NOT NULL,
    state       TEXT   NOT NULL,
    finished_at BIGINT
);
-- An open request is the node's work on that process: at most one per (node, process).
CREATE UNIQUE INDEX requests_open ON requests (node, process) WHERE state IN ('pending', 'active');

CREATE TABLE backoff (
    node            TEXT   NOT NULL,
    process         TEXT   NOT NULL,
    until           BIGINT NOT NULL,
    last_interval_s BIGINT NOT NULL,
    cause           TEXT   NOT NULL,
    PRIMARY KEY (node, process)
);

CREATE TABLE history (
    id      BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    node    TEXT   NOT NULL,
    process TEXT   NOT NULL,
    event   TEXT   NOT NULL,
    at      BIGINT NOT NULL,
    cause   TEXT,
    -- the slot held at this event, and whether this event gave it back: rollout timelines and
    -- the simulator's max_concurrent are computed from these two columns alone.
    slot     BIGINT,
    released BOOLEAN NOT NULL DEFAULT FALSE
);
CREATE INDEX history_node ON history (node, id);

-- How many wake-ups of the change counter must happen at least before p_node can take a slot:
-- 0 when it may take one now (queued, due, and fewer live waiters without a slot ahead of it
-- than free slots). Queued nodes whose session has expired do not hold the queue up; a node
-- that is not queued or still in backoff waits for its own timer, counted as one. The SQLite
-- store's rule (changes_before_turn), in one place for both the read-only look and the grant.
CREATE FUNCTION rota_changes_before_turn(p_node TEXT, p_now BIGINT) RETURNS BIGINT
LANGUAGE sql STABLE AS $$
    SELECT CASE
        WHEN me.state <> 'queued' OR me.queued_at IS NULL OR me.queued_at > p_now THEN 1
        ELSE GREATEST(0,
            (SELECT COUNT(*) FROM nodes n JOIN sessions s ON s.id = n.session_id
              WHERE n.state = 'queued' AND n.queued_at IS NOT NULL AND n.queued_at <= p_now
                AND (n.queued_at < me.queued_at
                     OR (n.queued_at = me.queued_at AND n.node < me.node))
                AND NOT s.superseded AND s.deadline > p_now
                AND NOT EXISTS (SELECT 1 FROM slots h WHERE h.holder = n.node))
            - (COALESCE((SELECT value FROM rota_meta WHERE key = 'concurrency'), '1')::BIGINT
               - (SELECT COUNT(*) FROM slots))
            + 1)
    END
    FROM nodes me WHERE me.node = p_node
$$;

-- Grants p_node a slot for session p_session in one statement, so that the lock ordering all
-- grants (p_lock, transaction-scoped) is held only while the server runs this, never across
-- round trips. Returns the slot (taken now or already held), -N to wait for N changes, or NULL
-- when the session is not current (fenced).
CREATE FUNCTION rota_grant_slot(p_node TEXT, p_session BIGINT, p_lock BIGINT) RETURNS BIGINT
LANGUAGE plpgsql AS $$
DECLARE
    v_now  BIGINT;
    v_slot BIGINT;
    v_wait BIGINT;
BEGIN
    PERFORM pg_advisory_xact_lock(p_lock);
    v_now := rota_now_ms();
    PERFORM 1 FROM nodes n JOIN sessions s ON s.id = n.session_id
      WHERE n.node = p_node AND s.id = p_session AND NOT s.superseded AND s.deadline > v_now
      FOR UPDATE OF n;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    SELECT slot INTO v_slot FROM slots WHERE holder = p_node;
    IF FOUND THEN
        RETURN v_slot;
    END IF;
    v_wait := rota_changes_before_turn(p_node, v_now);
    IF v_wait > 0 THEN
        RETURN -v_wait;
    END IF;
    INSERT INTO slots (slot, holder, acquired_at)
      SELECT g, p_node, v_now
      FROM generate_series(0,
          COALESCE((SELECT value FROM rota_meta WHERE key = 'concurrency'), '1')::BIGINT - 1) g
      WHERE NOT EXISTS (SELECT 1 FROM slots WHERE slot = g) ORDER BY g LIMIT 1
      RETURNING slot INTO v_slot;
    RETURN COALESCE(v_slot, -1);
END
$$;
