-- rota's schema. Times are unix milliseconds.
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
    last_result       TEXT
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

CREATE TABLE backoff (
    node            TEXT    NOT NULL,
    process         TEXT    NOT NULL,
    until           INTEGER NOT NULL,
    last_interval_s INTEGER NOT NULL,
    cause           TEXT    NOT NULL,
    PRIMARY KEY (node, process)
);

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
