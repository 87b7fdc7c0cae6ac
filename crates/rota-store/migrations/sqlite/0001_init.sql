-- rota's schema. Times are unix milliseconds.

-- The schema's marker, the fleet's settings (`concurrency`, the pause) and `wake`, which every
-- operator write moves so that other processes' agents look again.
CREATE TABLE rota_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
INSERT INTO rota_meta (key, value) VALUES ('schema', 'rota');

-- One row per agent incarnation. Only the newest unexpired session of a node may write.
CREATE TABLE sessions (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    node       TEXT    NOT NULL,
    started_at INTEGER NOT NULL,
    deadline   INTEGER NOT NULL,
    superseded INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX sessions_node ON sessions (node);

-- One row per node: its lifecycle state and the record of its current window.
CREATE TABLE nodes (
    node              TEXT PRIMARY KEY,
    session_id        INTEGER NOT NULL REFERENCES sessions (id),
    state             TEXT    NOT NULL,
    since             INTEGER NOT NULL,
    process           TEXT,
    pre_cordoned      INTEGER NOT NULL DEFAULT 0,
    cordoned_by_rota  INTEGER NOT NULL DEFAULT 0,
    boot_id           TEXT,
    reboot_started_at INTEGER,
    reboot_deadline   INTEGER,
    last_reboot_at    INTEGER,
    queued_at         INTEGER,
    last_result       TEXT,
    -- When last_result was recorded: a rollout counts the nodes that finished since it began.
    last_result_at    INTEGER,
    -- The slot group the node belongs to (a zone, a pool), as its agent recorded it.
    group_name        TEXT,
    -- Why the node's agent holds back (a blocker, the fleet's pause), and since when; NULL
    -- while nothing does.
    blocked_reason    TEXT,
    blocked_since     INTEGER
);

-- A row exists only while the slot is held; the keys make a double grant impossible.
CREATE TABLE slots (
    slot        INTEGER PRIMARY KEY,
    holder      TEXT    NOT NULL UNIQUE,
    acquired_at INTEGER NOT NULL
);

CREATE TABLE requests (
    id          INTEGER PRIMARY KEY,
    node        TEXT    NOT NULL,
    process     TEXT    NOT NULL,
    source      TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,
    state       TEXT    NOT NULL,
    finished_at INTEGER
);
-- An open request is the node's work on that process: at most one per (node, process).
CREATE UNIQUE INDEX requests_open ON requests (node, process) WHERE state IN ('pending', 'active');
-- A procedure runs at most once per node, ever: its request is unique in every state.
CREATE UNIQUE INDEX requests_procedure_once ON requests (node, process) WHERE process LIKE 'mop/%';

-- A failed (node, process)'s backoff: when it may try again, and the interval that got it there.
CREATE TABLE backoff (
    node            TEXT    NOT NULL,
    process         TEXT    NOT NULL,
    until           INTEGER NOT NULL,
    last_interval_s INTEGER NOT NULL,
    cause           TEXT    NOT NULL,
    PRIMARY KEY (node, process)
);

-- The work events of each node (started, finished, failed, canceled, postponed, released).
CREATE TABLE history (
    id      INTEGER PRIMARY KEY,
    node    TEXT    NOT NULL,
    process TEXT    NOT NULL,
    event   TEXT    NOT NULL,
    at      INTEGER NOT NULL,
    cause   TEXT,
    -- the slot held at this event, and whether this event gave it back: rollout timelines and
    -- the simulator's max_concurrent are computed from these two columns alone.
    slot     INTEGER,
    released INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX history_node ON history (node, id);

-- Procedures (MOPs), stored as submitted: the spec is rota-core's JSON form, immutable.
CREATE TABLE procedures (
    seq          INTEGER PRIMARY KEY,
    name         TEXT    NOT NULL UNIQUE,
    spec         TEXT    NOT NULL,
    submitted_at INTEGER NOT NULL
);

-- The operators' audit trail: who ran which operator command (unlock, retry, request, cancel,
-- pause, resume, submit), on which node and process, when and why. Written once per command,
-- never read by agents.
CREATE TABLE audit_records (
    id      INTEGER PRIMARY KEY,
    at      INTEGER NOT NULL,
    command TEXT    NOT NULL,
    -- NULL for the fleet (pause, resume, a procedure's submission)
    node    TEXT,
    process TEXT,
    by      TEXT    NOT NULL,
    reason  TEXT
);

-- The steps of each node's lifecycle: every state it entered, and when (`rota history
-- --steps`, the timeline's drain, maintenance, reboot and verify segments). Written by a
-- trigger in the same transaction as the state change, so every write that moves a node
-- (an agent's transition, an operator's unlock or retry, a failed procedure) records its step
-- without a statement of its own. Bounded: a node keeps its last 500 steps (about 80 windows).
-- A step's note is what last held the node back in it (`blocked_reason`), kept after it clears.
CREATE TABLE steps (
    id    INTEGER PRIMARY KEY,
    node  TEXT    NOT NULL,
    state TEXT    NOT NULL,
    at    INTEGER NOT NULL,
    note  TEXT
);
CREATE INDEX steps_node ON steps (node, id);

CREATE TRIGGER steps_record AFTER UPDATE OF state ON nodes
WHEN OLD.state IS NOT NEW.state
BEGIN
    INSERT INTO steps (node, state, at, note)
    VALUES (NEW.node, NEW.state, NEW.since, NEW.blocked_reason);
    DELETE FROM steps WHERE node = NEW.node AND id <= (
        SELECT id FROM steps WHERE node = NEW.node ORDER BY id DESC LIMIT 1 OFFSET 500
    );
END;

-- Disjoint from steps_record (the same state): the two never depend on each other's order.
CREATE TRIGGER steps_note AFTER UPDATE OF blocked_reason ON nodes
WHEN OLD.state IS NEW.state AND NEW.blocked_reason IS NOT NULL
    AND NEW.blocked_reason IS NOT OLD.blocked_reason
BEGIN
    UPDATE steps SET note = NEW.blocked_reason
    WHERE id = (SELECT max(id) FROM steps WHERE node = NEW.node);
END;
