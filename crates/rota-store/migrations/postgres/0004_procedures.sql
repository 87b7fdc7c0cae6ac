-- Procedures (MOPs), stored as submitted: the spec is rota-core's JSON form, immutable.
CREATE TABLE procedures (
    seq          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name         TEXT   NOT NULL UNIQUE,
    spec         TEXT   NOT NULL,
    submitted_at BIGINT NOT NULL
);

-- A procedure runs at most once per node, ever: its request is unique in every state.
CREATE UNIQUE INDEX requests_procedure_once ON requests (node, process) WHERE process LIKE 'mop/%';

-- A window that closes successfully with no request left open (each procedure already has its
-- own `finished`) records the release as an entry of its own, `released`.
CREATE OR REPLACE FUNCTION rota_write_window(
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
        SELECT p_node, process,
            CASE WHEN id = 0 AND p_event = 'finished' THEN 'released' ELSE p_event END,
            p_now, p_cause, p_slot,
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
                CASE WHEN v_next > (9223372036854775807 - p_now) / 1000
                     THEN 9223372036854775807 ELSE p_now + v_next * 1000 END,
                v_next, p_cause)
        ON CONFLICT (node, process) DO UPDATE SET until = excluded.until,
            last_interval_s = excluded.last_interval_s, cause = excluded.cause;
    END LOOP;
END
$$;
