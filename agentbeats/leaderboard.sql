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
-- resolved_low / resolved_high: the resolved share's 95% interval, the wider of Wilson's
-- and the one clustered by repository (docs/results.md, swegreen/core/intervals.py).
WITH rows AS (
  SELECT
    json_extract_string(to_json(results.participants), '$."' || r.participant || '"') AS id,
    r
  FROM results CROSS JOIN UNNEST(results.results) AS t(r)
),
per_repo AS (
  SELECT rows.id AS id, i.repo AS repo, COUNT(*) AS n,
    SUM(CASE WHEN i.status = 'resolved' THEN 1 ELSE 0 END) AS k
  FROM rows CROSS JOIN UNNEST(rows.r.instances) AS u(i)
  GROUP BY rows.id, i.repo
),
whole AS (
  SELECT id, SUM(n) AS n, SUM(k) AS k, COUNT(*) AS c FROM per_repo GROUP BY id
),
bounds AS (
  SELECT whole.id AS id, whole.k / whole.n AS p, whole.n AS n, whole.c AS c,
    CASE WHEN whole.c > 1 THEN 1.959963984540054 * SQRT(whole.c / (whole.c - 1)
      * SUM(POWER(per_repo.k - per_repo.n * whole.k / whole.n, 2))) / whole.n END AS clustered,
    (whole.k / whole.n + 3.841458820694124 / (2 * whole.n)) / (1 + 3.841458820694124 / whole.n)
      AS centre,
    1.959963984540054 * SQRT(whole.k / whole.n * (1 - whole.k / whole.n) / whole.n
      + 3.841458820694124 / (4 * whole.n * whole.n)) / (1 + 3.841458820694124 / whole.n)
      AS half
  FROM whole JOIN per_repo ON per_repo.id = whole.id
  GROUP BY whole.id, whole.k, whole.n, whole.c
)
SELECT
  rows.id AS id,
  CAST(SUM(r.total_instances) AS INTEGER) AS instances,
  ROUND(SUM(r.counts.resolved) / SUM(r.total_instances), 4) AS resolved,
  ROUND(ANY_VALUE(GREATEST(0, LEAST(b.centre - b.half,
    COALESCE(b.p - b.clustered, b.centre - b.half)))), 4) AS resolved_low,
  ROUND(ANY_VALUE(LEAST(1, GREATEST(b.centre + b.half,
    COALESCE(b.p + b.clustered, b.centre + b.half)))), 4) AS resolved_high,
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
FROM rows LEFT JOIN bounds AS b ON b.id = rows.id
GROUP BY rows.id
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
