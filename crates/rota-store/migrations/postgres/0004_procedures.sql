-- Procedures (MOPs), stored as submitted: the spec is rota-core's JSON form, immutable.
CREATE TABLE procedures (
    seq          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name         TEXT   NOT NULL UNIQUE,
    spec         TEXT   NOT NULL,
    submitted_at BIGINT NOT NULL
);

-- A procedure runs at most once per node, ever: its request is unique in every state.
CREATE UNIQUE INDEX requests_procedure_once ON requests (node, process) WHERE process LIKE 'mop/%';
