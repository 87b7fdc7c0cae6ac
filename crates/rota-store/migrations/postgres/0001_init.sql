-- rota's schema: the tables and meaning of migrations/sqlite/0001_init.sql. Times are unix
-- milliseconds; every "now" the store writes or compares comes from the database's clock
-- (rota_now_ms), so that session deadlines hold across hosts whose clocks disagree. The rules
-- are rota-core's; the SQL here is the schema and the one trigger that records steps.
CREATE FUNCTION rota_now_ms() RETURNS BIGINT LANGUAGE sql VOLATILE AS
$$ SELECT (extract(epoch FROM clock_timestamp()) * 1000)::BIGINT $$;

-- The schema's marker, and the fleet's settings (`concurrency`, the pause).
CREATE TABLE rota_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL,
    -- A concurrency no fleet can have (0, above 1000, not a number), written by hand, is
    -- refused by the database, naming this constraint, instead of no node ever taking a slot.
    CONSTRAINT rota_meta_concurrency_1_to_1000 CHECK (
        CASE
            WHEN key <> 'concurrency' THEN TRUE
            WHEN value ~ '^[0-9]{1,4}$' THEN value::INT BETWEEN 1 AND 1000
            ELSE FALSE
        END
    )
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

-- One row per node: its lifecycle state and the record of its current window.
--
-- No index but the key: an update of columns no index covers is HOT (the new version goes on
-- the same page, the next reader prunes the old one, no new index entries), and a node's row
-- is updated several times per window. An index on `queued_at` made every queue entry and exit
-- a non-HOT update whose dead line pointer only VACUUM reclaims, and the table and index grew
-- by a page per few hundred transitions between autovacuum runs (`rota bench`, issue 6). The
-- queue count reads the whole table instead, but only for a queued node. Half of each page is
-- left free (fillfactor 50) so that the new versions fit on the same page.
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
    last_result       TEXT,
    -- When last_result was recorded: a rollout counts the nodes that finished since it began.
    last_result_at    BIGINT,
    -- The slot group the node belongs to (a zone, a pool), as its agent recorded it.
    group_name        TEXT,
    -- Why the node's agent holds back (a blocker, the fleet's pause), and since when; NULL
    -- while nothing does.
    blocked_reason    TEXT,
    blocked_since     BIGINT
) WITH (fillfactor = 50);

-- The slots as fixed rows that a grant and a release update (holder and acquired_at NULL while
-- free), made when a grant first needs them, so a new concurrency needs no other write. Rows
-- inserted by a grant and deleted by a release left a dead row and two dead index entries
-- each until VACUUM: after 10 s of `rota bench` the table had about 150 pages for at most 4
-- live rows, which every look at the queue read. An update of `holder`, which no index covers,
-- is HOT, and with 90% of each page left free (fillfactor 10) the table stays one page.
--
-- "One node per slot" rests on the row: a grant updates only a row without a holder, and two
-- grants that pick the same row are ordered by its row lock, the second finding it taken.
-- "One slot per node" rests on the node's row lock, which every grant and release takes (a
-- unique key on the holder would make every grant non-HOT).
CREATE TABLE slot_rows (
    slot        BIGINT PRIMARY KEY,
    holder      TEXT,
    acquired_at BIGINT
) WITH (fillfactor = 10);
-- The slots that are held, one row each: what every read of "the slots" means.
CREATE VIEW slots AS SELECT slot, holder, acquired_at FROM slot_rows WHERE holder IS NOT NULL;

CREATE TABLE requests (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    node        TEXT   NOT NULL,
    process     TEXT   NOT NULL,
    source      TEXT   NOT NULL,
    created_at  BIGINT NOT NULL,
    state       TEXT   NOT NULL,
    finished_at BIGINT
);
-- An open request is the node's work on that process: at most one per (node, process). Reads
-- of a node's open requests use this index too (their statements say `state IN ('pending',
-- 'active')`, so that a generic plan may): an update of a request's state keeps its key here,
-- where an index on (node, state) gained a dead entry per update that every lookup walked
-- until VACUUM.
CREATE UNIQUE INDEX requests_open ON requests (node, process) WHERE state IN ('pending', 'active');
-- A procedure runs at most once per node, ever: its request is unique in every state.
CREATE UNIQUE INDEX requests_procedure_once ON requests (node, process) WHERE process LIKE 'mop/%';

-- A failed (node, process)'s backoff: when it may try again, and the interval that got it there.
CREATE TABLE backoff (
    node            TEXT   NOT NULL,
    process         TEXT   NOT NULL,
    until           BIGINT NOT NULL,
    last_interval_s BIGINT NOT NULL,
    cause           TEXT   NOT NULL,
    PRIMARY KEY (node, process)
);

-- The work events of each node (started, finished, failed, canceled, postponed, released).
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

-- Procedures (MOPs), stored as submitted: the spec is rota-core's JSON form, immutable.
CREATE TABLE procedures (
    seq          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name         TEXT   NOT NULL UNIQUE,
    spec         TEXT   NOT NULL,
    submitted_at BIGINT NOT NULL
);

-- The operators' audit trail: who ran which operator command (unlock, retry, request, cancel,
-- pause, resume, submit), on which node and process, when and why. Written once per command,
-- never read by agents.
CREATE TABLE audit_records (
    id      BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at      BIGINT NOT NULL,
    command TEXT   NOT NULL,
    -- NULL for the fleet (pause, resume, a procedure's submission)
    node    TEXT,
    process TEXT,
    by      TEXT   NOT NULL,
    reason  TEXT
);

-- The steps of each node's lifecycle: every state it entered, and when (`rota history
-- --steps`, the timeline's drain, maintenance, reboot and verify segments). Written by a
-- trigger in the same transaction as the state change, so every write that moves a node (a
-- transition, an operator's unlock or retry, a failed procedure) records its step with no
-- statement or round trip of its own. Bounded: a node keeps its last 500 steps (about 80
-- windows). A step's note is what last held the node back in it (`blocked_reason`), kept after
-- it clears.
CREATE TABLE steps (
    id    BIGSERIAL PRIMARY KEY,
    node  TEXT   NOT NULL,
    state TEXT   NOT NULL,
    at    BIGINT NOT NULL,
    note  TEXT
);
CREATE INDEX steps_node ON steps (node, id);

CREATE FUNCTION rota_record_step() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO steps (node, state, at, note)
    VALUES (NEW.node, NEW.state, NEW.since, NEW.blocked_reason);
    DELETE FROM steps WHERE node = NEW.node AND id <= (
        SELECT s.id FROM steps s WHERE s.node = NEW.node ORDER BY s.id DESC OFFSET 500 LIMIT 1
    );
    RETURN NULL;
END $$;

CREATE TRIGGER steps_record AFTER UPDATE OF state ON nodes
FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state)
EXECUTE FUNCTION rota_record_step();

CREATE FUNCTION rota_note_step() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE steps SET note = NEW.blocked_reason
    WHERE id = (SELECT max(s.id) FROM steps s WHERE s.node = NEW.node);
    RETURN NULL;
END $$;

-- Disjoint from steps_record (the same state): the two never depend on each other's order.
CREATE TRIGGER steps_note AFTER UPDATE OF blocked_reason ON nodes
FOR EACH ROW WHEN (OLD.state IS NOT DISTINCT FROM NEW.state AND NEW.blocked_reason IS NOT NULL
    AND NEW.blocked_reason IS DISTINCT FROM OLD.blocked_reason)
EXECUTE FUNCTION rota_note_step();
