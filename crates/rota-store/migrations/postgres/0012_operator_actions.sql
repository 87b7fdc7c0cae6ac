-- The operators' audit trail: who did which operator action (unlock, retry, request, cancel,
-- pause, resume, submit), to which node and process, when and why. Written once per action,
-- never read by agents.
CREATE TABLE operator_actions (
    id      BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at      BIGINT NOT NULL,
    action  TEXT   NOT NULL,
    -- NULL for the fleet (pause, resume, a procedure's submission)
    node    TEXT,
    process TEXT,
    by      TEXT   NOT NULL,
    reason  TEXT
);
