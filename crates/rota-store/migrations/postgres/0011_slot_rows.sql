-- Slots as fixed rows that a grant and a release update, instead of rows inserted by a grant
-- and deleted by a release (issue 6, measured with `rota bench`).
--
-- Each insert and delete left a dead row and two dead index entries behind until VACUUM, which
-- autovacuum runs at most once a minute per database: after 10 s of `rota bench` (about 14,000
-- cycles) the table had about 150 pages for at most 4 live rows, every look at the queue read
-- them all, and every look up of a node's slot walked its dead entries in the holder's unique
-- index. An update of a column that no index covers is HOT: the new version goes on the same
-- page, and the next reader of the page prunes the old one, so the table stays one page.
--
-- Without the unique holder key, "one slot per node" rests on the node's row lock, which every
-- grant and release of a node already takes (rota_acquire_slot, rota_transition,
-- rota_write_window): a grant re-reads the node's slot under the lock, in its UPDATE. "One
-- node per slot" rests on the slot row: a grant updates only a row without a holder, and two
-- grants that pick the same row are ordered by its row lock, the second finding it taken.
--
-- The view `slots` keeps the meaning the other statements and functions read: one row per
-- slot that is held.
ALTER TABLE slots RENAME TO slot_rows;
ALTER TABLE slot_rows DROP CONSTRAINT slots_holder_key,
    ALTER COLUMN holder DROP NOT NULL,
    ALTER COLUMN acquired_at DROP NOT NULL,
    SET (fillfactor = 10);
CREATE VIEW slots AS SELECT slot, holder, acquired_at FROM slot_rows WHERE holder IS NOT NULL;

-- A window change finds the node's open requests through `requests_open` (the states it moves
-- from are open ones, which its statements now say, so that a generic plan, whose state is a
-- parameter, may use the partial index). 0002's index on (node, state) goes: each update of a
-- request's state gave it a new key there, so the dead entries of a node's earlier requests
-- stayed until VACUUM, and every lookup walked them (175 entries per lookup after 10 s of
-- `rota bench`). In `requests_open` an update keeps the key, and such duplicates are removed
-- as the page fills (bottom-up deletion).
DROP INDEX requests_node_state;

-- 0009's grant, with 0009's look. A grant takes the lowest free row below the concurrency; the
-- rows are made when first needed, so a new concurrency needs no other write.
CREATE OR REPLACE FUNCTION rota_acquire_slot(p_node TEXT, p_session BIGINT) RETURNS BIGINT
LANGUAGE plpgsql AS $$
DECLARE
    v_slot        BIGINT;
    v_wait        BIGINT;
    v_state       TEXT;
    v_queued_at   BIGINT;
    v_concurrency BIGINT;
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
            - (x.concurrency - cardinality(x.holders))
            + 1)
    END, x.held, x.concurrency
    INTO v_wait, v_slot, v_concurrency
    FROM (SELECT rota_now_ms() AS now,
                 COALESCE(array_agg(h.holder), '{}') AS holders,
                 max(h.slot) FILTER (WHERE h.holder = p_node) AS held,
                 COALESCE((SELECT value FROM rota_meta WHERE key = 'concurrency'), '1')::BIGINT
                     AS concurrency
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
    IF v_slot IS NULL
       AND (v_state <> 'queued' OR v_queued_at IS NULL OR v_queued_at > rota_now_ms()) THEN
        RETURN -1;
    END IF;
    LOOP
        -- Under the node's lock: no slot of its own (one may have been granted by another
        -- session of the node since the look), then the lowest free row. A grant that took
        -- the same row first holds its lock; this UPDATE waits for it and then finds the row
        -- taken.
        UPDATE slot_rows SET holder = p_node, acquired_at = rota_now_ms()
        WHERE slot = (SELECT r.slot FROM slot_rows r
                      WHERE r.holder IS NULL AND r.slot < v_concurrency
                      ORDER BY r.slot LIMIT 1)
          AND holder IS NULL
          AND NOT EXISTS (SELECT 1 FROM slot_rows o WHERE o.holder = p_node)
        RETURNING slot INTO v_slot;
        IF FOUND THEN
            RETURN v_slot;
        END IF;
        SELECT slot INTO v_slot FROM slots WHERE holder = p_node;
        IF FOUND THEN
            RETURN v_slot;
        END IF;
        -- Rows not made yet (a new database, a larger concurrency) are made, and the grant
        -- tries again; otherwise another grant took the row this one picked, and each pass
        -- sees the slots anew, so the loop ends with a slot or a wait.
        INSERT INTO slot_rows (slot)
        SELECT g FROM generate_series(0, v_concurrency - 1) g
        ON CONFLICT DO NOTHING;
        IF NOT FOUND THEN
            v_wait := rota_changes_before_turn(p_node, rota_now_ms());
            IF v_wait > 0 THEN
                RETURN -v_wait;
            END IF;
            SELECT COALESCE((SELECT value FROM rota_meta WHERE key = 'concurrency'), '1')::BIGINT
            INTO v_concurrency;
        END IF;
    END LOOP;
END
$$;

-- 0009's transition, giving the slot back by clearing its row.
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
            WHERE node = p_node AND state = p_w_from AND state IN ('pending', 'active');
        ELSIF p_w_releases THEN
            -- A window that ends: one statement moves the requests, clears their backoff and
            -- gives the slot back.
            WITH moved AS (
                UPDATE requests SET state = p_w_to,
                    finished_at = CASE WHEN p_w_to IN ('done', 'canceled') THEN v_now END
                WHERE node = p_node AND state = p_w_from AND state IN ('pending', 'active') RETURNING id, process
            ), cleared AS (
                DELETE FROM backoff
                WHERE p_w_clears_backoff AND node = p_node
                  AND process IN (SELECT process FROM moved)
            ), freed AS (
                UPDATE slot_rows SET holder = NULL, acquired_at = NULL WHERE holder = p_node
            )
            SELECT array_agg(process ORDER BY id) INTO v_processes FROM moved;
        ELSE
            WITH moved AS (
                UPDATE requests SET state = p_w_to,
                    finished_at = CASE WHEN p_w_to IN ('done', 'canceled') THEN v_now END
                WHERE node = p_node AND state = p_w_from AND state IN ('pending', 'active') RETURNING id, process
            )
            SELECT array_agg(process ORDER BY id) INTO v_processes FROM moved;
            IF p_w_clears_backoff AND v_processes IS NOT NULL THEN
                DELETE FROM backoff WHERE node = p_node AND process = ANY (v_processes);
            END IF;
        END IF;
        IF p_w_releases AND p_w_to IS NULL THEN
            UPDATE slot_rows SET holder = NULL, acquired_at = NULL WHERE holder = p_node;
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

-- 0006's window change (unlock's), giving the slot back by clearing its row.
CREATE OR REPLACE FUNCTION rota_write_window(
    p_node TEXT, p_slot BIGINT, p_from TEXT, p_to TEXT, p_event TEXT, p_cause TEXT,
    p_fallback TEXT, p_clears_backoff BOOLEAN, p_releases BOOLEAN,
    p_backoff_initial BIGINT, p_backoff_maximum BIGINT, p_backoff_exponent DOUBLE PRECISION,
    p_now BIGINT
) RETURNS VOID LANGUAGE plpgsql AS $$
DECLARE
    v_processes TEXT[];
    v_event     TEXT := p_event;
BEGIN
    IF p_to IS NULL THEN
        SELECT array_agg(process ORDER BY id) INTO v_processes FROM requests
        WHERE node = p_node AND state = p_from AND state IN ('pending', 'active');
    ELSE
        WITH moved AS (
            UPDATE requests SET state = p_to,
                finished_at = CASE WHEN p_to IN ('done', 'canceled') THEN p_now END
            WHERE node = p_node AND state = p_from AND state IN ('pending', 'active') RETURNING id, process
        )
        SELECT array_agg(process ORDER BY id) INTO v_processes FROM moved;
        IF p_clears_backoff AND v_processes IS NOT NULL THEN
            DELETE FROM backoff WHERE node = p_node AND process = ANY (v_processes);
        END IF;
    END IF;
    IF p_releases THEN
        UPDATE slot_rows SET holder = NULL, acquired_at = NULL WHERE holder = p_node;
    END IF;
    IF v_processes IS NULL THEN
        IF p_fallback IS NULL THEN
            RETURN;
        END IF;
        v_processes := ARRAY[p_fallback];
        -- A window that closes with no request left open (each procedure has its own
        -- `finished` already) records the release as an entry of its own.
        IF p_event = 'finished' THEN
            v_event := 'released';
        END IF;
    END IF;
    INSERT INTO history (node, process, event, at, cause, slot, released)
    SELECT p_node, t.process, v_event, p_now, p_cause, p_slot,
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
    -- OFFSET 0 keeps the planner from pulling the subquery up, which would call the function
    -- once per use of `next`: three times.
    CROSS JOIN LATERAL (SELECT rota_backoff_next(b.last_interval_s, p_backoff_initial,
        p_backoff_maximum, p_backoff_exponent) AS next OFFSET 0) x
    ON CONFLICT (node, process) DO UPDATE SET until = excluded.until,
        last_interval_s = excluded.last_interval_s, cause = excluded.cause;
END
$$;
