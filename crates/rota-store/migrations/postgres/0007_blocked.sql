-- Why a node's agent holds back (a blocker, the fleet's pause), and since when; NULL while
-- nothing does.
ALTER TABLE nodes ADD COLUMN blocked_reason TEXT;
ALTER TABLE nodes ADD COLUMN blocked_since BIGINT;

-- A write's result carries the node's blocked reason too.
ALTER TYPE rota_node_write ADD ATTRIBUTE blocked_reason TEXT, ADD ATTRIBUTE blocked_since BIGINT;

-- 0003's retry, unchanged except that its result has the blocked reason. The transition's
-- result gets it in 0009, which rewrites that function anyway.
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
