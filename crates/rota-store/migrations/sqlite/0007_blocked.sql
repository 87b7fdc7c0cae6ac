-- Why a node's agent holds back (a blocker, the fleet's pause), and since when; NULL while
-- nothing does.
ALTER TABLE nodes ADD COLUMN blocked_reason TEXT;
ALTER TABLE nodes ADD COLUMN blocked_since INTEGER;
