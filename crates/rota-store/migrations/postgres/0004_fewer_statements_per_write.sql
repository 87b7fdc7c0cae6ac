-- Fewer statements per write: inside a PL/pgSQL function every statement sets up an executor
-- of its own, a large part of what a short write costs the server.

-- 0003's grant ran the queue check twice: in the read-only look and again under the node's
-- row lock. Without a lock shared by all grants the second check adds nothing about the other
-- nodes: a grant in progress or committed since leaves the look's answer as it was (0003), a
-- release only frees more. What the row lock orders is this node's own record, so under the
-- lock the grant re-checks only that the node is still queued and due. The full check runs
-- again only when the look did not run (the node held a slot then) or another grant took the
-- slot this one picked.
CREATE OR REPLACE FUNCTION rota_acquire_slot(p_node TEXT, p_session BIGINT) RETURNS BIGINT
LANGUAGE plpgsql AS $$
DECLARE
    v_slot      BIGINT;
    v_wait      BIGINT;
    v_looked    BOOLEAN := FALSE;
    v_state     TEXT;
    v_queued_at BIGINT;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM slots WHERE holder = p_node) THEN
        -- No such node: it waits like any node that is not queued.
        v_wait := COALESCE(rota_changes_before_turn(p_node, rota_now_ms()), 1);
        IF v_wait > 0 THEN
            RETURN -v_wait;
        END IF;
        v_looked := TRUE;
    END IF;
    SELECT n.state, n.queued_at INTO v_state, v_queued_at
    FROM nodes n JOIN sessions s ON s.id = n.session_id
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
        IF v_looked THEN
            -- rota_changes_before_turn's rule for the node itself.
            IF v_state <> 'queued' OR v_queued_at IS NULL OR v_queued_at > rota_now_ms() THEN
                RETURN -1;
            END IF;
            v_looked := FALSE;
        ELSE
            v_wait := rota_changes_before_turn(p_node, rota_now_ms());
            IF v_wait > 0 THEN
                RETURN -v_wait;
            END IF;
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

-- 0003's transition with one read after the lock instead of two: whether the session is current
-- and the node's slot, both as of that moment. The slot is then also the new record's: a node's
-- slot is taken and given back only under its row lock, which this transition holds, so only
-- the window change itself can have released it since.
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
    v_current BOOLEAN;
    v_slot    BIGINT;
    v_now     BIGINT;
BEGIN
    SELECT n.state, n.process, n.session_id INTO v_state, v_process, v_session
    FROM nodes n WHERE n.node = p_node FOR UPDATE;
    v_now := rota_now_ms();
    SELECT EXISTS (
               SELECT 1 FROM sessions s
               WHERE s.id = p_session AND NOT s.superseded AND s.deadline > v_now),
           (SELECT h.slot FROM slots h WHERE h.holder = p_node)
    INTO v_current, v_slot;
    IF v_session IS DISTINCT FROM p_session OR NOT v_current THEN
        v_result.outcome := 'fenced';
        RETURN v_result;
    END IF;
    IF v_state <> p_from THEN
        v_result.outcome := 'conflict';
        v_result.state := v_state;
        RETURN v_result;
    END IF;
    IF p_w_event IS NOT NULL THEN
        PERFORM rota_write_window(p_node, v_slot, p_w_from, p_w_to, p_w_event, p_w_cause,
            CASE WHEN p_w_fallback IS NOT NULL THEN COALESCE(v_process, p_w_fallback) END,
            p_w_clears_backoff, p_w_releases,
            p_backoff_initial, p_backoff_maximum, p_backoff_exponent, v_now);
        IF p_w_releases THEN
            v_slot := NULL;
        END IF;
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
        n.last_result, v_slot
    INTO v_result;
    IF p_notify IS NOT NULL THEN
        PERFORM pg_notify(p_channel, p_notify);
    END IF;
    RETURN v_result;
END
$$;
