-- Every store write in one server-side call. On a shared database the store is bound by round
-- trips, so each write that reads before it changes (a transition, a slot grant, a new session,
-- an operator's retry) runs here as one function: the client sends one statement, which runs
-- in its own transaction, takes the same row locks as 0001's multi-statement transactions did,
-- and commits (with its NOTIFY) or rolls back as a whole.

-- What a node write hands back: 'ok' with the node's new record; 'fenced' (the session is not
-- current); 'conflict' with the node's actual state (compare-and-swap failed); 'missing' (no
-- such node); 'not_allowed' with the node's state (an operator's action that does not apply).
CREATE TYPE rota_node_write AS (
    outcome           TEXT,
    node              TEXT,
    state             TEXT,
    since             BIGINT,
    process           TEXT,
    pre_cordoned      BOOLEAN,
    cordoned_by_rota  BOOLEAN,
    boot_id           TEXT,
    reboot_started_at BIGINT,
    reboot_deadline   BIGINT,
    last_reboot_at    BIGINT,
    queued_at         BIGINT,
    last_result       TEXT,
    slot              BIGINT
);

-- Window changes find a node's requests by state: without this index each one scanned every
-- request ever made.
CREATE INDEX requests_node_state ON requests (node, state);

-- The functions below are PL/pgSQL, not SQL: PostgreSQL plans an SQL function's query again
-- at every call (before version 18), a PL/pgSQL function's once per connection.

-- The node's record as a write result.
CREATE FUNCTION rota_node_written(p_node TEXT) RETURNS rota_node_write
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_result rota_node_write;
BEGIN
    SELECT 'ok', n.node, n.state, n.since, n.process, n.pre_cordoned, n.cordoned_by_rota,
           n.boot_id, n.reboot_started_at, n.reboot_deadline, n.last_reboot_at,
           n.queued_at, n.last_result, h.slot
    INTO v_result
    FROM nodes n LEFT JOIN slots h ON h.holder = n.node WHERE n.node = p_node;
    RETURN v_result;
END
$$;

-- 0001's queue rule, unchanged, in PL/pgSQL for its cached plans: every slot grant runs it
-- under the grant lock, so its cost is paid by every grant waiting behind.
CREATE OR REPLACE FUNCTION rota_changes_before_turn(p_node TEXT, p_now BIGINT) RETURNS BIGINT
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_state     TEXT;
    v_queued_at BIGINT;
    v_ahead     BIGINT;
    v_free      BIGINT;
BEGIN
    SELECT me.state, me.queued_at INTO v_state, v_queued_at FROM nodes me WHERE me.node = p_node;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF v_state <> 'queued' OR v_queued_at IS NULL OR v_queued_at > p_now THEN
        RETURN 1;
    END IF;
    SELECT COUNT(*) INTO v_ahead FROM nodes n JOIN sessions s ON s.id = n.session_id
    WHERE n.state = 'queued' AND n.queued_at IS NOT NULL AND n.queued_at <= p_now
      AND (n.queued_at < v_queued_at OR (n.queued_at = v_queued_at AND n.node < p_node))
      AND NOT s.superseded AND s.deadline > p_now
      AND NOT EXISTS (SELECT 1 FROM slots h WHERE h.holder = n.node);
    v_free := COALESCE((SELECT value FROM rota_meta WHERE key = 'concurrency'), '1')::BIGINT
              - (SELECT COUNT(*) FROM slots);
    RETURN GREATEST(0, v_ahead - v_free + 1);
END
$$;

-- BackoffPolicy::next (rota-core) for a policy the caller has normalised: the wait after a
-- failure in whole seconds, given the previous one (NULL for the first failure). float8 is
-- IEEE 754 double like Rust's f64, so the product and the tolerances round the same way.
CREATE FUNCTION rota_backoff_next(
    p_previous BIGINT, p_initial BIGINT, p_maximum BIGINT, p_exponent DOUBLE PRECISION
) RETURNS BIGINT LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_previous BIGINT;
    v_product  DOUBLE PRECISION;
    v_nearest  DOUBLE PRECISION;
    v_next     BIGINT;
BEGIN
    IF p_previous IS NULL THEN
        RETURN p_initial;
    END IF;
    v_previous := GREATEST(p_previous, 0);
    -- float8 multiplication raises on overflow where f64 gives infinity; such a product is far
    -- above any maximum (at most 2^63 s), and so is every product with a factor above 1e280.
    IF v_previous > 0 AND p_exponent > 1e280::DOUBLE PRECISION THEN
        RETURN p_maximum;
    END IF;
    v_product := v_previous::DOUBLE PRECISION * p_exponent;
    IF v_product = 'NaN'::DOUBLE PRECISION OR v_product >= p_maximum::DOUBLE PRECISION THEN
        RETURN p_maximum;
    END IF;
    v_nearest := round(v_product);
    IF abs(v_product - v_nearest)
        <= GREATEST(1e-9::DOUBLE PRECISION, v_product * 1e-12::DOUBLE PRECISION) THEN
        v_next := v_nearest::BIGINT;
    ELSE
        v_next := ceil(v_product)::BIGINT;
    END IF;
    v_next := LEAST(v_next, p_maximum);
    IF v_next < v_previous THEN
        RETURN p_maximum;
    END IF;
    RETURN v_next;
END
$$;

-- One window change of p_node, whose row the caller has locked: moves the requests in p_from
-- to p_to (they stay when p_to is NULL), clears their backoff, frees the slot, and appends one
-- history entry per request in request order (p_fallback's entry when there is none), the
-- last one carrying `released`. With a backoff policy (p_backoff_maximum not NULL) every
-- process that got an entry backs off.
CREATE FUNCTION rota_write_window(
    p_node TEXT, p_slot BIGINT, p_from TEXT, p_to TEXT, p_event TEXT, p_cause TEXT,
    p_fallback TEXT, p_clears_backoff BOOLEAN, p_releases BOOLEAN,
    p_backoff_initial BIGINT, p_backoff_maximum BIGINT, p_backoff_exponent DOUBLE PRECISION,
    p_now BIGINT
) RETURNS VOID LANGUAGE plpgsql AS $$
DECLARE
    v_processes TEXT[];
    v_process   TEXT;
    v_previous  BIGINT;
    v_next      BIGINT;
BEGIN
    WITH moved AS (
        UPDATE requests SET state = p_to,
            finished_at = CASE WHEN p_to IN ('done', 'canceled') THEN p_now END
        WHERE node = p_node AND state = p_from AND p_to IS NOT NULL RETURNING id, process
    ), kept AS (
        SELECT id, process FROM requests WHERE node = p_node AND state = p_from AND p_to IS NULL
    ), picked AS (
        SELECT id, process FROM moved UNION ALL SELECT id, process FROM kept
    ), entries AS (
        SELECT id, process FROM picked
        UNION ALL SELECT 0, p_fallback
        WHERE p_fallback IS NOT NULL AND NOT EXISTS (SELECT 1 FROM picked)
    ), cleared AS (
        DELETE FROM backoff
        WHERE p_clears_backoff AND node = p_node AND process IN (SELECT process FROM moved)
    ), freed AS (
        DELETE FROM slots WHERE p_releases AND holder = p_node
    ), written AS (
        INSERT INTO history (node, process, event, at, cause, slot, released)
        SELECT p_node, process, p_event, p_now, p_cause, p_slot,
            p_releases AND row_number() OVER (ORDER BY id) = count(*) OVER ()
        FROM entries ORDER BY id RETURNING id, process
    )
    SELECT array_agg(process ORDER BY id) INTO v_processes FROM written;

    IF p_backoff_maximum IS NULL THEN
        RETURN;
    END IF;
    FOREACH v_process IN ARRAY COALESCE(v_processes, '{}') LOOP
        SELECT last_interval_s INTO v_previous FROM backoff
        WHERE node = p_node AND process = v_process;
        v_next := rota_backoff_next(v_previous, p_backoff_initial, p_backoff_maximum,
                                    p_backoff_exponent);
        INSERT INTO backoff (node, process, until, last_interval_s, cause)
        VALUES (p_node, v_process,
                -- now + next seconds, saturating like the Rust side's arithmetic
                CASE WHEN v_next > (9223372036854775807 - p_now) / 1000
                     THEN 9223372036854775807 ELSE p_now + v_next * 1000 END,
                v_next, p_cause)
        ON CONFLICT (node, process) DO UPDATE SET until = excluded.until,
            last_interval_s = excluded.last_interval_s, cause = excluded.cause;
    END LOOP;
END
$$;

-- One lifecycle step (Store::transition): locks the node's row, checks by the database's clock
-- that p_session is current (after the lock, so a session superseded while this waited is
-- seen), compares the node's state with p_from, applies the window change (p_w_event NULL: none)
-- and the node's new fields, and notifies p_channel with p_notify if that is not NULL. The
-- p_sets_* flags tell "set to NULL" apart from "leave as it is".
CREATE FUNCTION rota_transition(
    p_node TEXT, p_session BIGINT, p_from TEXT, p_to TEXT,
    p_clears_process BOOLEAN, p_process TEXT, p_resets_cordon BOOLEAN,
    p_pre_cordoned BOOLEAN, p_cordoned_by_rota BOOLEAN,
    p_sets_boot_id BOOLEAN, p_boot_id TEXT,
    p_sets_reboot_started_at BOOLEAN, p_reboot_started_at BIGINT,
    p_sets_reboot_deadline BOOLEAN, p_reboot_deadline BIGINT,
    p_last_reboot_at BIGINT, p_sets_queued_at BOOLEAN, p_queued_at BIGINT, p_last_result TEXT,
    p_w_from TEXT, p_w_to TEXT, p_w_event TEXT, p_w_cause TEXT, p_w_fallback TEXT,
    p_w_clears_backoff BOOLEAN, p_w_releases BOOLEAN,
    p_backoff_initial BIGINT, p_backoff_maximum BIGINT, p_backoff_exponent DOUBLE PRECISION,
    p_channel TEXT, p_notify TEXT
) RETURNS rota_node_write LANGUAGE plpgsql AS $$
DECLARE
    v_result  rota_node_write;
    v_state   TEXT;
    v_process TEXT;
    v_session BIGINT;
    v_slot    BIGINT;
    v_now     BIGINT;
BEGIN
    SELECT n.state, n.process, n.session_id INTO v_state, v_process, v_session
    FROM nodes n WHERE n.node = p_node FOR UPDATE;
    v_now := rota_now_ms();
    IF v_session IS DISTINCT FROM p_session OR NOT EXISTS (
        SELECT 1 FROM sessions s
        WHERE s.id = p_session AND NOT s.superseded AND s.deadline > v_now
    ) THEN
        v_result.outcome := 'fenced';
        RETURN v_result;
    END IF;
    IF v_state <> p_from THEN
        v_result.outcome := 'conflict';
        v_result.state := v_state;
        RETURN v_result;
    END IF;
    IF p_w_event IS NOT NULL THEN
        SELECT h.slot INTO v_slot FROM slots h WHERE h.holder = p_node;
        PERFORM rota_write_window(p_node, v_slot, p_w_from, p_w_to, p_w_event, p_w_cause,
            CASE WHEN p_w_fallback IS NOT NULL THEN COALESCE(v_process, p_w_fallback) END,
            p_w_clears_backoff, p_w_releases,
            p_backoff_initial, p_backoff_maximum, p_backoff_exponent, v_now);
    END IF;
    UPDATE nodes n SET state = p_to, since = v_now,
        process = CASE WHEN p_clears_process THEN NULL ELSE COALESCE(p_process, n.process) END,
        pre_cordoned = CASE WHEN p_resets_cordon THEN FALSE
                            ELSE COALESCE(p_pre_cordoned, n.pre_cordoned) END,
        cordoned_by_rota = CASE WHEN p_resets_cordon THEN FALSE
                                ELSE COALESCE(p_cordoned_by_rota, n.cordoned_by_rota) END,
        boot_id = CASE WHEN p_sets_boot_id THEN p_boot_id ELSE n.boot_id END,
        reboot_started_at = CASE WHEN p_sets_reboot_started_at THEN p_reboot_started_at
                                 ELSE n.reboot_started_at END,
        reboot_deadline = CASE WHEN p_sets_reboot_deadline THEN p_reboot_deadline
                               ELSE n.reboot_deadline END,
        last_reboot_at = COALESCE(p_last_reboot_at, n.last_reboot_at),
        queued_at = CASE WHEN p_sets_queued_at THEN p_queued_at ELSE n.queued_at END,
        last_result = COALESCE(p_last_result, n.last_result)
    WHERE n.node = p_node;
    IF p_notify IS NOT NULL THEN
        PERFORM pg_notify(p_channel, p_notify);
    END IF;
    RETURN rota_node_written(p_node);
END
$$;

-- Store::try_acquire_slot in one call: a read-only look at the queue first, so that waiters
-- that are not at the front never take rota_grant_slot's lock (a release does not set off a
-- stampede of grants); then the grant. Returns what rota_grant_slot returns.
CREATE FUNCTION rota_acquire_slot(p_node TEXT, p_session BIGINT, p_lock BIGINT) RETURNS BIGINT
LANGUAGE plpgsql AS $$
DECLARE
    v_wait BIGINT;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM slots WHERE holder = p_node) THEN
        -- No such node: it waits like any node that is not queued.
        v_wait := COALESCE(rota_changes_before_turn(p_node, rota_now_ms()), 1);
        IF v_wait > 0 THEN
            RETURN -v_wait;
        END IF;
    END IF;
    RETURN rota_grant_slot(p_node, p_session, p_lock);
END
$$;

-- Store::open_session in one call: the node's row first, as every fenced write locks it, so a
-- write of the old session either commits before the new session exists or sees it and is
-- refused; then every earlier session is superseded and the node (idle if new) points at the
-- new one. Returns the new session's id.
CREATE FUNCTION rota_open_session(p_node TEXT, p_ttl BIGINT) RETURNS BIGINT
LANGUAGE plpgsql AS $$
DECLARE
    v_now BIGINT;
    v_id  BIGINT;
BEGIN
    PERFORM 1 FROM nodes WHERE node = p_node FOR UPDATE;
    UPDATE sessions SET superseded = TRUE WHERE node = p_node AND NOT superseded;
    v_now := rota_now_ms();
    INSERT INTO sessions (node, started_at, deadline) VALUES (p_node, v_now, v_now + p_ttl)
    RETURNING id INTO v_id;
    INSERT INTO nodes (node, session_id, state, since) VALUES (p_node, v_id, 'idle', v_now)
    ON CONFLICT (node) DO UPDATE SET session_id = excluded.session_id;
    RETURN v_id;
END
$$;

-- Store::retry in one call: a failed node goes back to maintaining (it keeps slot and cordon),
-- and p_channel is notified with p_notify.
CREATE FUNCTION rota_retry(p_node TEXT, p_channel TEXT, p_notify TEXT) RETURNS rota_node_write
LANGUAGE plpgsql AS $$
DECLARE
    v_result rota_node_write;
    v_state  TEXT;
BEGIN
    SELECT n.state INTO v_state FROM nodes n WHERE n.node = p_node FOR UPDATE;
    IF NOT FOUND THEN
        v_result.outcome := 'missing';
        RETURN v_result;
    END IF;
    IF v_state <> 'failed' THEN
        v_result.outcome := 'not_allowed';
        v_result.state := v_state;
        RETURN v_result;
    END IF;
    UPDATE nodes n SET state = 'maintaining', since = rota_now_ms() WHERE n.node = p_node;
    PERFORM pg_notify(p_channel, p_notify);
    RETURN rota_node_written(p_node);
END
$$;
