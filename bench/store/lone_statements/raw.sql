\set s random(1, 1000000000)
INSERT INTO loom_lone_bench.raw (execution_id, sequence, kind, payload, metadata, time_ms) VALUES (('r-' || :s)::text, 1, 'STEP_COMPLETED', repeat('x',200), '{}', 5);
