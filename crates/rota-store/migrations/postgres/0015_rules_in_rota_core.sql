-- The rules of rota's state are rota-core's (NodeOverview::apply for every write of a node's
-- record, schedule for who takes a slot), for both stores: the PostgreSQL store reads a node's
-- record under its row lock, lets the core decide, and persists the answer in the same
-- transaction; a grant reads the queue and the slot rows (FOR UPDATE) and applies the core's
-- schedule; a session is opened by plain statements under the node's row lock. The PL/pgSQL
-- functions that held the same rules are no longer called.
--
-- Kept: rota_now_ms() (the database's clock, which every statement reads) and
-- rota_record_step() (the trigger that records each state a node enters, part of the schema).
DROP FUNCTION rota_transition(TEXT, BIGINT, TEXT, TEXT, BOOLEAN, TEXT, BOOLEAN, BOOLEAN,
    BOOLEAN, BOOLEAN, TEXT, BOOLEAN, BIGINT, BOOLEAN, BIGINT, BIGINT, BOOLEAN, BIGINT, TEXT,
    TEXT, TEXT, TEXT, TEXT, TEXT, BOOLEAN, BOOLEAN, BIGINT, BIGINT, DOUBLE PRECISION, TEXT,
    TEXT, TEXT[], TEXT[]);
DROP FUNCTION rota_transition(TEXT, BIGINT, TEXT, TEXT, BOOLEAN, TEXT, BOOLEAN, BOOLEAN,
    BOOLEAN, BOOLEAN, TEXT, BOOLEAN, BIGINT, BOOLEAN, BIGINT, BIGINT, BOOLEAN, BIGINT, TEXT,
    TEXT, TEXT, TEXT, TEXT, TEXT, BOOLEAN, BOOLEAN, BIGINT, BIGINT, DOUBLE PRECISION, TEXT,
    TEXT);
DROP FUNCTION rota_write_window(TEXT, BIGINT, TEXT, TEXT, TEXT, TEXT, TEXT, BOOLEAN, BOOLEAN,
    BIGINT, BIGINT, DOUBLE PRECISION, BIGINT);
DROP FUNCTION rota_acquire_slot(TEXT, BIGINT, BIGINT);
DROP FUNCTION rota_acquire_slot(TEXT, BIGINT);
DROP FUNCTION rota_changes_before_turn(TEXT, BIGINT);
DROP FUNCTION rota_backoff_next(BIGINT, BIGINT, BIGINT, DOUBLE PRECISION);
DROP FUNCTION rota_retry(TEXT, TEXT, TEXT);
DROP FUNCTION rota_open_session(TEXT, BIGINT);
-- What rota_transition and rota_retry returned (rota_node_written and rota_grant_slot went in
-- 0003).
DROP TYPE rota_node_write;
