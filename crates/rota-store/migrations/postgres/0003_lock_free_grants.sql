-- Throughput with many concurrent agents (issue 6): slot grants no longer queue behind one
-- advisory lock, and the write functions run fewer statements each. Every function keeps its
-- meaning; only how much it costs the server changes.

-- A node's row changed only in columns no index covers is updated in place (HOT): no new index
-- entries, and the dead version is pruned from the page by later reads. 0001's queue index had
-- `state` in its predicate, so every transition, even failed → maintaining, was a non-HOT
-- update. The queue rule reads only queued nodes, which always have a queued_at.
DROP INDEX nodes_queue;
CREATE INDEX nodes_queued_at ON nodes (queued_at, node) WHERE queued_at IS NOT NULL;

-- 0002's queue rule in one statement instead of three: every acquire runs it at least once.
CREATE OR REPLACE FUNCTION rota_changes_before_turn(p_node TEXT, p_now BIGINT) RETURNS BIGINT
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_wait BIGINT;
BEGIN
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
    INTO v_wait
    FROM nodes me WHERE me.node = p_node;
    RETURN v_wait;
END
$$;

-- Store::try_acquire_slot without a lock shared by all grants. Waiters not at the front only
-- read (no row lock, no transaction id). The front locks its own node's row, checks its
-- session, and inserts the lowest free slot. Two grants at once cannot both take a slot one of
-- them should not have: a grant in progress is invisible to the other, but so is the slot it
-- takes, so the other's count of waiters ahead minus free slots is the same before and after
-- it. Two that pick the same free slot meet on its primary key: the later one waits for the
-- earlier to commit, inserts nothing, and looks again with the slot taken. The keys still
-- bound the holders: slot numbers are below the concurrency, one row per slot and per holder.
-- Returns the slot (taken now or already held), -N to wait for N changes, or NULL when the
-- session is not current (fenced).
CREATE FUNCTION rota_acquire_slot(p_node TEXT, p_session BIGINT) RETURNS BIGINT
LANGUAGE plpgsql AS $$
DECLARE
    v_slot BIGINT;
    v_wait BIGINT;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM slots WHERE holder = p_node) THEN
        -- No such node: it waits like any node that is not queued.
        v_wait := COALESCE(rota_changes_before_turn(p_node, rota_now_ms()), 1);
        IF v_wait > 0 THEN
            RETURN -v_wait;
        END IF;
    END IF;
    PERFORM 1 FROM nodes n JOIN sessions s ON s.id = n.session_id
      WHERE n.node = p_node AND s.id = p_session AND NOT s.superseded
        AND s.deadline > rota_now_ms()
      FOR UPDATE OF n;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    LOOP
        SELECT slot INTO v_slot FROM slots WHERE holder = p_node;
        IF FOUND THEN
            RETURN v_slot;
        END IF;
        v_wait := rota_changes_before_turn(p_node, rota_now_ms());
        IF v_wait > 0 THEN
            RETURN -v_wait;
        END IF;
        INSERT INTO slots (slot, holder, acquired_at)
          SELECT g, p_node, rota_now_ms()
          FROM generate_series(0,
              COALESCE((SELECT value FROM rota_meta WHERE key = 'concurrency'), '1')::BIGINT
              - 1) g
          WHERE NOT EXISTS (SELECT 1 FROM slots WHERE slot = g) ORDER BY g LIMIT 1
        ON CONFLICT DO NOTHING
        RETURNING slot INTO v_slot;
        IF FOUND THEN
            RETURN v_slot;
        END IF;
        -- Another grant committed the slot this one picked: each pass sees one more taken
        -- slot, so the loop ends with a slot or a wait.
    END LOOP;
END
$$;

-- Agents of the previous release, still running during a rolling upgrade, call 0002's
-- signature: they take part in the same lock-free grants (their lock is no longer needed).
CREATE OR REPLACE FUNCTION rota_acquire_slot(p_node TEXT, p_session BIGINT, p_lock BIGINT)
RETURNS BIGINT LANGUAGE sql AS $$ SELECT rota_acquire_slot(p_node, p_session) $$;

DROP FUNCTION rota_grant_slot(TEXT, BIGINT, BIGINT);

-- 0002's window change in fewer, smaller statements: one data-modifying CTE executes (and its
-- executor sets up) every part on every call, so each part now runs only when it applies, and a
-- failure's backoff is one statement for all its processes. Same rows, same order.
CREATE OR REPLACE FUNCTION rota_write_window(
    p_node TEXT, p_slot BIGINT, p_from TEXT, p_to TEXT, p_event TEXT, p_cause TEXT,
    p_fallback TEXT, p_clears_backoff BOOLEAN, p_releases BOOLEAN,
    p_backoff_initial BIGINT, p_backoff_maximum BIGINT, p_backoff_exponent DOUBLE PRECISION,
    p_now BIGINT
) RETURNS VOID LANGUAGE plpgsql AS $$
DECLARE
    v_processes TEXT[];
BEGIN
    IF p_to IS NULL THEN
        SELECT array_agg(process ORDER BY id) INTO v_processes FROM requests
        WHERE node = p_node AND state = p_from;
    ELSE
        WITH moved AS (
            UPDATE requests SET state = p_to,
                finished_at = CASE WHEN p_to IN ('done', 'canceled') THEN p_now END
            WHERE node = p_node AND state = p_from RETURNING id, process
        )
        SELECT array_agg(process ORDER BY id) INTO v_processes FROM moved;
        IF p_clears_backoff AND v_processes IS NOT NULL THEN
            DELETE FROM backoff WHERE node = p_node AND process = ANY (v_processes);
        END IF;
    END IF;
    IF p_releases THEN
        DELETE FROM slots WHERE holder = p_node;
    END IF;
    IF v_processes IS NULL THEN
        IF p_fallback IS NULL THEN
            RETURN;
        END IF;
        v_processes := ARRAY[p_fallback];
    END IF;
    INSERT INTO history (node, process, event, at, cause, slot, released)
    SELECT p_node, t.process, p_event, p_now, p_cause, p_slot,
        p_releases AND t.i = cardinality(v_processes)
    FROM unnest(v_processes) WITH ORDINALITY AS t (process, i) ORDER BY t.i;
    IF p_backoff_maximum IS NULL THEN
        RETURN;
    END IF;
    -- The processes are distinct: at most one open request per (node, process).
    INSERT INTO backoff (node, process, until, last_interval_s, cause)
    SELECT p_node, t.process,
        -- now + next seconds, saturating like the Rust side's arithmetic
        CASE WHEN x.next > (9223372036854775807 - p_now) / 1000
             THEN 9223372036854775807 ELSE p_now + x.next * 1000 END,
        x.next, p_cause
    FROM unnest(v_processes) AS t (process)
    LEFT JOIN backoff b ON b.node = p_node AND b.process = t.process
    CROSS JOIN LATERAL (SELECT rota_backoff_next(b.last_interval_s, p_backoff_initial,
        p_backoff_maximum, p_backoff_exponent) AS next) x
    ON CONFLICT (node, process) DO UPDATE SET until = excluded.until,
        last_interval_s = excluded.last_interval_s, cause = excluded.cause;
END
$$;

-- 0002's transition, with the node's new record taken from the UPDATE itself instead of a
-- separate read.
CREATE OR REPLACE FUNCTION rota_transition(
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
    WHERE n.node = p_node
    RETURNING 'ok', n.node, n.state, n.since, n.process, n.pre_cordoned, n.cordoned_by_rota,
        n.boot_id, n.reboot_started_at, n.reboot_deadline, n.last_reboot_at, n.queued_at,
        n.last_result, (SELECT h.slot FROM slots h WHERE h.holder = p_node)
    INTO v_result;
    IF p_notify IS NOT NULL THEN
        PERFORM pg_notify(p_channel, p_notify);
    END IF;
    RETURN v_result;
END
$$;

-- 0002's retry as one UPDATE that checks the state itself (a concurrent write of the node is
-- waited for and its result re-checked, as a row lock would); the node's state is read
-- separately only to explain a refusal.
CREATE OR REPLACE FUNCTION rota_retry(p_node TEXT, p_channel TEXT, p_notify TEXT)
RETURNS rota_node_write LANGUAGE plpgsql AS $$
DECLARE
    v_result rota_node_write;
    v_state  TEXT;
BEGIN
    UPDATE nodes n SET state = 'maintaining', since = rota_now_ms()
    WHERE n.node = p_node AND n.state = 'failed'
    RETURNING 'ok', n.node, n.state, n.since, n.process, n.pre_cordoned, n.cordoned_by_rota,
        n.boot_id, n.reboot_started_at, n.reboot_deadline, n.last_reboot_at, n.queued_at,
        n.last_result, (SELECT h.slot FROM slots h WHERE h.holder = p_node)
    INTO v_result;
    IF NOT FOUND THEN
        SELECT n.state INTO v_state FROM nodes n WHERE n.node = p_node;
        v_result.outcome := CASE WHEN FOUND THEN 'not_allowed' ELSE 'missing' END;
        v_result.state := v_state;
        RETURN v_result;
    END IF;
    PERFORM pg_notify(p_channel, p_notify);
    RETURN v_result;
END
$$;

-- The transition and the retry above return the UPDATE's own row instead.
DROP FUNCTION rota_node_written(TEXT);
