-- A transition that also records requests (`Transition::request`): an agent that finds a new
-- sentinel records the request and queues the node in one call and one transaction, instead
-- of two. The requests go in after the transition, as `add_request` inserts them (an open
-- request of the same process is kept, by the partial unique index), and only if the
-- transition was written: a fenced or conflicting one records none.
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
    p_channel TEXT, p_notify TEXT,
    p_request_processes TEXT[], p_request_sources TEXT[]
) RETURNS rota_node_write LANGUAGE plpgsql AS $$
DECLARE
    v_result rota_node_write;
BEGIN
    v_result := rota_transition(p_node, p_session, p_from, p_to,
        p_clears_process, p_process, p_resets_cordon, p_pre_cordoned, p_cordoned_by_rota,
        p_sets_boot_id, p_boot_id, p_sets_reboot_started_at, p_reboot_started_at,
        p_sets_reboot_deadline, p_reboot_deadline, p_last_reboot_at, p_sets_queued_at,
        p_queued_at, p_last_result, p_w_from, p_w_to, p_w_event, p_w_cause, p_w_fallback,
        p_w_clears_backoff, p_w_releases, p_backoff_initial, p_backoff_maximum,
        p_backoff_exponent, p_channel, p_notify);
    IF v_result.outcome = 'ok' THEN
        INSERT INTO requests (node, process, source, created_at, state)
        SELECT p_node, r.process, r.source, rota_now_ms(), 'pending'
        FROM unnest(p_request_processes, p_request_sources) AS r (process, source)
        ON CONFLICT DO NOTHING;
    END IF;
    RETURN v_result;
END
$$;
