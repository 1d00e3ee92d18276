-- Leaderboard queries for DuckDB, over the results files the leaderboard template commits
-- (table `results` = read_json_auto('results/*.json'), one file per submission:
-- {"status": "completed", "participants": {<component>: "<AgentBeats id>", ...},
--  "results": [<one result row per participant and shard>, ...]}).
-- Each result row names its participant's role (`participant`), which is its component's
-- name in the scenario, so the id is looked up by it: any role name works. Counts are
-- summed before dividing, so shards and submissions of one participant add up exactly.
-- The platform takes these as the JSON list in leaderboard.json (scripts/leaderboard_json.py
-- writes it from this file, and tests/test_amber.py checks that the two agree).

-- name: SWE-bench Verified
SELECT
  json_extract_string(to_json(results.participants), '$."' || r.participant || '"') AS id,
  CAST(SUM(r.total_instances) AS INTEGER) AS instances,
  ROUND(SUM(r.counts.resolved) / SUM(r.total_instances), 4) AS resolved,
  ROUND(SUM(r.counts.breaking_resolved) / SUM(r.total_instances), 4) AS breaking_resolved,
  ROUND(SUM(r.counts.partially_resolved) / SUM(r.total_instances), 4) AS partially_resolved,
  ROUND(SUM(r.counts.work_in_progress) / SUM(r.total_instances), 4) AS work_in_progress,
  ROUND(SUM(r.counts.regression) / SUM(r.total_instances), 4) AS regression,
  ROUND(SUM(r.counts.no_op) / SUM(r.total_instances), 4) AS no_op,
  ROUND(SUM(r.counts.error) / SUM(r.total_instances), 4) AS error,
  ROUND(SUM(r.fail_to_pass_passed) / NULLIF(SUM(r.fail_to_pass_total), 0), 4) AS f2p_pass_rate,
  ROUND(SUM(r.pass_to_pass_passed) / NULLIF(SUM(r.pass_to_pass_total), 0), 4) AS p2p_pass_rate,
  -- rows whose tests ran (the others count P2P as kept only where the code stayed as it was)
  CAST(SUM(r.tests_ran_instances) AS INTEGER) AS tests_ran
FROM results CROSS JOIN UNNEST(results.results) AS t(r)
GROUP BY id
ORDER BY resolved DESC, id;

-- name: Per repository
SELECT
  json_extract_string(to_json(results.participants), '$."' || r.participant || '"') AS id,
  i.repo AS repo,
  COUNT(*) AS instances,
  ROUND(AVG(CASE WHEN i.status = 'resolved' THEN 1.0 ELSE 0.0 END), 4) AS resolved
FROM results
  CROSS JOIN UNNEST(results.results) AS t(r)
  CROSS JOIN UNNEST(r.instances) AS u(i)
GROUP BY id, repo
ORDER BY id, repo;
