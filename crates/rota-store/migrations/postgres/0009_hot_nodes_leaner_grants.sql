-- Slot cycles with many concurrent agents (issue 6), measured with `rota bench`: the same
-- meaning as 0004/0006, with less work for the server per call and tables that stay small.

-- Every transition of a node that entered or left the queue changed `queued_at`, which the
-- queue index covers, so two of a cycle's three node updates were not HOT: each left a dead
-- line pointer that only VACUUM reclaims, and between autovacuum runs the nodes table and the
-- index grew by a page per few hundred transitions (54 pages for 32 nodes after 10 s of
-- `rota bench`), which every queue count then scanned. The planner chose a sequential scan of
-- the nodes for the queue count anyway; without the index every update of a node is HOT, and
-- free space left in each page (fillfactor) keeps the new versions on the same page. The cost
-- moves to large fleets: there a queue count reads the whole nodes table (a few hundred pages
-- for thousands of hosts), but only for a queued node, once when it queues and once per change
-- that may be its turn, while every transition of every node was paying for the index.
DROP INDEX nodes_queued_at;
ALTER TABLE nodes SET (fillfactor = 50);

-- 0004's grant. The look is one statement instead of a check plus a call of
-- rota_changes_before_turn, and it reads the slots once (the holders and how many are taken)
-- instead of once per queued node and once more for the count. The front no longer reads its
-- own slot before it inserts one: under its row lock only another grant of the same node can
-- have given it one since the look, and then the insert meets the holder key and the loop
-- reads that slot. The lowest free slot comes from one scan of the slots, not a probe per slot
-- number. Returns the slot (taken now or already held), -N to wait for N changes, or NULL when
-- the session is not current (fenced).
CREATE OR REPLACE FUNCTION rota_acquire_slot(p_node TEXT, p_session BIGINT) RETURNS BIGINT
LANGUAGE plpgsql AS $$
DECLARE
    v_slot      BIGINT;
    v_wait      BIGINT;
    v_state     TEXT;
    v_queued_at BIGINT;
BEGIN
    -- rota_changes_before_turn's rule (0007's: a blocked node does not hold the queue up); a
    -- node that holds a slot goes on to the fenced read.
    SELECT CASE
        WHEN x.held IS NOT NULL THEN 0
        -- No such node: it waits like any node that is not queued.
        WHEN me.node IS NULL OR me.state <> 'queued' OR me.queued_at IS NULL
             OR me.queued_at > x.now THEN 1
        ELSE GREATEST(0,
            (SELECT COUNT(*) FROM nodes n JOIN sessions s ON s.id = n.session_id
              WHERE n.state = 'queued' AND n.queued_at IS NOT NULL AND n.queued_at <= x.now
                AND (n.queued_at < me.queued_at
                     OR (n.queued_at = me.queued_at AND n.node < me.node))
                AND NOT s.superseded AND s.deadline > x.now
                AND n.blocked_reason IS NULL
                AND n.node <> ALL (x.holders))
            - (COALESCE((SELECT value FROM rota_meta WHERE key = 'concurrency'), '1')::BIGINT
               - cardinality(x.holders))
            + 1)
    END, x.held
    INTO v_wait, v_slot
    FROM (SELECT rota_now_ms() AS now,
                 COALESCE(array_agg(h.holder), '{}') AS holders,
                 max(h.slot) FILTER (WHERE h.holder = p_node) AS held
          FROM slots h) x
    LEFT JOIN nodes me ON me.node = p_node;
    IF v_wait > 0 THEN
        RETURN -v_wait;
    END IF;
    SELECT n.state, n.queued_at INTO v_state, v_queued_at
    FROM nodes n JOIN sessions s ON s.id = n.session_id
    WHERE n.node = p_node AND s.id = p_session AND NOT s.superseded
      AND s.deadline > rota_now_ms()
    FOR UPDATE OF n;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    -- Under the lock only the node's own record can have changed since the look: the rest of
    -- the queue rule holds as 0003 and 0004 say.
    IF v_slot IS NULL
       AND (v_state <> 'queued' OR v_queued_at IS NULL OR v_queued_at > rota_now_ms()) THEN
        RETURN -1;
    END IF;
    LOOP
        IF v_slot IS NULL THEN
            INSERT INTO slots (slot, holder, acquired_at)
              SELECT g, p_node, rota_now_ms()
              FROM generate_series(0,
                  COALESCE((SELECT value FROM rota_meta WHERE key = 'concurrency'), '1')::BIGINT
                  - 1) g
              WHERE g NOT IN (SELECT slot FROM slots) ORDER BY g LIMIT 1
            ON CONFLICT DO NOTHING
            RETURNING slot INTO v_slot;
            IF FOUND THEN
                RETURN v_slot;
            END IF;
        END IF;
        SELECT slot INTO v_slot FROM slots WHERE holder = p_node;
        IF FOUND THEN
            RETURN v_slot;
        END IF;
        -- Another grant committed the slot this one picked (or the node's slot was given back
        -- while this waited for the lock): each pass sees the slots anew, so the loop ends with
        -- a slot or a wait.
        v_wait := rota_changes_before_turn(p_node, rota_now_ms());
        IF v_wait > 0 THEN
            RETURN -v_wait;
        END IF;
    END LOOP;
END
$$;

-- 0004's transition (with 0007's blocked reason in its result) with the window change inline (rota_write_window of 0006, which unlock
-- still calls) and the session check in the node's UPDATE: one statement locks the row, checks
-- the session, compares the state, writes the node and reads its slot, and the reason for a
-- refusal is worked out only when there is one. A session superseded while the UPDATE waited
-- for the row lock is seen: superseding also points the node's row at the new session, and the
-- UPDATE re-checks the row's new version (`n.session_id = p_session`). The slot is read before
-- the window change (the history entries carry it) and the node's slot afterwards is the same
-- unless the change released it: a node's slot is taken and given back only under its row
-- lock.
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
    v_result    rota_node_write;
    v_state     TEXT;
    v_process   TEXT;
    v_session   BIGINT;
    v_now       BIGINT;
    v_processes TEXT[];
    v_event     TEXT := p_w_event;
BEGIN
    -- A window change locks the row first, so that the UPDATE's snapshot, which gives the
    -- history entries their slot, is taken after every earlier grant or release of the node;
    -- it also needs the node's process from before. Without one the UPDATE locks the row.
    IF p_w_event IS NOT NULL THEN
        SELECT n.process INTO v_process FROM nodes n WHERE n.node = p_node FOR UPDATE;
    END IF;
    v_now := rota_now_ms();
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
    WHERE n.node = p_node AND n.session_id = p_session AND n.state = p_from
      AND EXISTS (SELECT 1 FROM sessions s
                  WHERE s.id = p_session AND NOT s.superseded AND s.deadline > v_now)
    RETURNING 'ok', n.node, n.state, n.since, n.process, n.pre_cordoned, n.cordoned_by_rota,
        n.boot_id, n.reboot_started_at, n.reboot_deadline, n.last_reboot_at, n.queued_at,
        n.last_result, (SELECT h.slot FROM slots h WHERE h.holder = p_node),
        n.blocked_reason, n.blocked_since
    INTO v_result;
    IF NOT FOUND THEN
        SELECT n.state, n.session_id INTO v_state, v_session FROM nodes n WHERE n.node = p_node;
        IF v_session IS DISTINCT FROM p_session OR NOT EXISTS (
            SELECT 1 FROM sessions s
            WHERE s.id = p_session AND NOT s.superseded AND s.deadline > v_now
        ) THEN
            v_result.outcome := 'fenced';
        ELSE
            v_result.outcome := 'conflict';
            v_result.state := v_state;
        END IF;
        RETURN v_result;
    END IF;
    IF p_w_event IS NOT NULL THEN
        -- rota_write_window (0006) with the node's process before this transition.
        IF p_w_to IS NULL THEN
            SELECT array_agg(process ORDER BY id) INTO v_processes FROM requests
            WHERE node = p_node AND state = p_w_from;
        ELSIF p_w_releases THEN
            -- A window that ends: one statement moves the requests, clears their backoff and
            -- gives the slot back.
            WITH moved AS (
                UPDATE requests SET state = p_w_to,
                    finished_at = CASE WHEN p_w_to IN ('done', 'canceled') THEN v_now END
                WHERE node = p_node AND state = p_w_from RETURNING id, process
            ), cleared AS (
                DELETE FROM backoff
                WHERE p_w_clears_backoff AND node = p_node
                  AND process IN (SELECT process FROM moved)
            ), freed AS (
                DELETE FROM slots WHERE holder = p_node
            )
            SELECT array_agg(process ORDER BY id) INTO v_processes FROM moved;
        ELSE
            WITH moved AS (
                UPDATE requests SET state = p_w_to,
                    finished_at = CASE WHEN p_w_to IN ('done', 'canceled') THEN v_now END
                WHERE node = p_node AND state = p_w_from RETURNING id, process
            )
            SELECT array_agg(process ORDER BY id) INTO v_processes FROM moved;
            IF p_w_clears_backoff AND v_processes IS NOT NULL THEN
                DELETE FROM backoff WHERE node = p_node AND process = ANY (v_processes);
            END IF;
        END IF;
        IF p_w_releases AND p_w_to IS NULL THEN
            DELETE FROM slots WHERE holder = p_node;
        END IF;
        IF v_processes IS NULL AND p_w_fallback IS NOT NULL THEN
            v_processes := ARRAY[COALESCE(v_process, p_w_fallback)];
            -- A window that closes with no request left open (each procedure has its own
            -- `finished` already) records the release as an entry of its own.
            IF p_w_event = 'finished' THEN
                v_event := 'released';
            END IF;
        END IF;
        IF v_processes IS NOT NULL THEN
            INSERT INTO history (node, process, event, at, cause, slot, released)
            SELECT p_node, t.process, v_event, v_now, p_w_cause, v_result.slot,
                p_w_releases AND t.i = cardinality(v_processes)
            FROM unnest(v_processes) WITH ORDINALITY AS t (process, i) ORDER BY t.i;
            IF p_backoff_maximum IS NOT NULL THEN
                -- The processes are distinct: at most one open request per (node, process).
                INSERT INTO backoff (node, process, until, last_interval_s, cause)
                SELECT p_node, t.process,
                    -- now + next seconds, saturating like the Rust side's arithmetic
                    CASE WHEN x.next > (9223372036854775807 - v_now) / 1000
                         THEN 9223372036854775807 ELSE v_now + x.next * 1000 END,
                    x.next, p_w_cause
                FROM unnest(v_processes) AS t (process)
                LEFT JOIN backoff b ON b.node = p_node AND b.process = t.process
                -- OFFSET 0 keeps the planner from pulling the subquery up, which would call
                -- the function once per use of `next`: three times.
                CROSS JOIN LATERAL (SELECT rota_backoff_next(b.last_interval_s,
                    p_backoff_initial, p_backoff_maximum, p_backoff_exponent) AS next
                    OFFSET 0) x
                ON CONFLICT (node, process) DO UPDATE SET until = excluded.until,
                    last_interval_s = excluded.last_interval_s, cause = excluded.cause;
            END IF;
        END IF;
        IF p_w_releases THEN
            v_result.slot := NULL;
        END IF;
    END IF;
    IF p_notify IS NOT NULL THEN
        PERFORM pg_notify(p_channel, p_notify);
    END IF;
    RETURN v_result;
END
$$;
