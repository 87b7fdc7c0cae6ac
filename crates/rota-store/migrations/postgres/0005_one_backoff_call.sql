-- 0003's window change computed a failure's next backoff three times per process: the
-- planner pulled the subquery that calls rota_backoff_next up into the INSERT's expressions,
-- and `next` is used three times there. Same rows; one call per process.
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
    -- OFFSET 0 keeps the planner from pulling the subquery up, which would call the function
    -- once per use of `next`: three times.
    CROSS JOIN LATERAL (SELECT rota_backoff_next(b.last_interval_s, p_backoff_initial,
        p_backoff_maximum, p_backoff_exponent) AS next OFFSET 0) x
    ON CONFLICT (node, process) DO UPDATE SET until = excluded.until,
        last_interval_s = excluded.last_interval_s, cause = excluded.cause;
END
$$;
