-- The grant functions read the concurrency straight from rota_meta. A value `set_concurrency`
-- would refuse (0, above 1000, not a number), written by hand, was taken as it is: with 0 no
-- node ever took a slot, without a word. The database itself now refuses such a write, naming
-- this constraint. NOT VALID: a database that holds such a value already still migrates (its
-- agents name the value when they read it); only new writes are checked.
ALTER TABLE rota_meta ADD CONSTRAINT rota_meta_concurrency_1_to_1000 CHECK (
    CASE
        WHEN key <> 'concurrency' THEN TRUE
        WHEN value ~ '^[0-9]{1,4}$' THEN value::INT BETWEEN 1 AND 1000
        ELSE FALSE
    END
) NOT VALID;
