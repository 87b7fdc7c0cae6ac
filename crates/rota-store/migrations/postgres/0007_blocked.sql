-- Why a node's agent holds back (a blocker, the fleet's pause), and since when; NULL while
-- nothing does.
ALTER TABLE nodes ADD COLUMN blocked_reason TEXT;
ALTER TABLE nodes ADD COLUMN blocked_since BIGINT;

-- A write's result carries the node's blocked reason too.
ALTER TYPE rota_node_write ADD ATTRIBUTE blocked_reason TEXT, ADD ATTRIBUTE blocked_since BIGINT;

-- 0004's transition and 0003's retry, unchanged except that their result has the blocked
-- reason.
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
        n.last_result, v_slot, n.blocked_reason, n.blocked_since
    INTO v_result;
    IF p_notify IS NOT NULL THEN
        PERFORM pg_notify(p_channel, p_notify);
    END IF;
    RETURN v_result;
END
$$;

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
        n.last_result, (SELECT h.slot FROM slots h WHERE h.holder = p_node),
        n.blocked_reason, n.blocked_since
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

-- 0003's queue rule, except that a blocked node does not hold the queue up: it keeps its place
-- and takes its slot once nothing blocks it, while the nodes behind it go on.
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
                AND n.blocked_reason IS NULL
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
