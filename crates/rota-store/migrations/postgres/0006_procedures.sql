-- Procedures (MOPs), stored as submitted: the spec is rota-core's JSON form, immutable.
CREATE TABLE procedures (
    seq          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name         TEXT   NOT NULL UNIQUE,
    spec         TEXT   NOT NULL,
    submitted_at BIGINT NOT NULL
);

-- A procedure runs at most once per node, ever: its request is unique in every state.
CREATE UNIQUE INDEX requests_procedure_once ON requests (node, process) WHERE process LIKE 'mop/%';

-- 0005's window change, except that a window closing successfully with no request left open
-- records `released` instead of a second `finished` for the node's process.
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
