-- The steps of each node's lifecycle: every state it entered, and when (`rota history
-- --steps`, the timeline's drain, maintenance, reboot and verify segments). Written by a
-- trigger in the same transaction as the state change, so every write that moves a node
-- (rota_transition, an operator's unlock or retry, a failed procedure) records its step with
-- no statement or round trip of its own. Bounded: a node keeps its last 500 steps (about 80
-- windows).
CREATE TABLE steps (
    id    BIGSERIAL PRIMARY KEY,
    node  TEXT   NOT NULL,
    state TEXT   NOT NULL,
    at    BIGINT NOT NULL
);
CREATE INDEX steps_node ON steps (node, id);

CREATE FUNCTION rota_record_step() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO steps (node, state, at) VALUES (NEW.node, NEW.state, NEW.since);
    DELETE FROM steps WHERE node = NEW.node AND id <= (
        SELECT s.id FROM steps s WHERE s.node = NEW.node ORDER BY s.id DESC OFFSET 500 LIMIT 1
    );
    RETURN NULL;
END $$;

CREATE TRIGGER steps_record AFTER UPDATE OF state ON nodes
FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state)
EXECUTE FUNCTION rota_record_step();
