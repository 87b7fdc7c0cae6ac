-- The steps of each node's lifecycle: every state it entered, and when (`rota history
-- --steps`, the timeline's drain, maintenance, reboot and verify segments). Written by a
-- trigger in the same transaction as the state change, so every write that moves a node
-- (an agent's transition, an operator's unlock or retry, a failed procedure) records its step
-- without a statement of its own. Bounded: a node keeps its last 500 steps (about 80 windows).
CREATE TABLE steps (
    id    INTEGER PRIMARY KEY,
    node  TEXT    NOT NULL,
    state TEXT    NOT NULL,
    at    INTEGER NOT NULL
);
CREATE INDEX steps_node ON steps (node, id);

CREATE TRIGGER steps_record AFTER UPDATE OF state ON nodes
WHEN OLD.state IS NOT NEW.state
BEGIN
    INSERT INTO steps (node, state, at) VALUES (NEW.node, NEW.state, NEW.since);
    DELETE FROM steps WHERE node = NEW.node AND id <= (
        SELECT id FROM steps WHERE node = NEW.node ORDER BY id DESC LIMIT 1 OFFSET 500
    );
END;
