-- Leaderboard queries for DuckDB over the results JSON files AgentBeats collects
-- (table `results`: {"participants": {"agent": "<id>"}, "results": [<result row>, ...]}).
-- The first column must be `id`, the participant's AgentBeats id. Counts are summed before
-- dividing, so runs and shards of one participant add up exactly.

-- name: SWE-bench Verified
SELECT
  results.participants.agent AS id,
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
  CAST(ANY_VALUE(ran.tests_ran) AS INTEGER) AS tests_ran
FROM results CROSS JOIN UNNEST(results.results) AS t(r)
  JOIN (
    SELECT results.participants.agent AS id, COUNT(*) FILTER (WHERE i.tests_ran) AS tests_ran
    FROM results
      CROSS JOIN UNNEST(results.results) AS t(r)
      CROSS JOIN UNNEST(r.instances) AS u(i)
    WHERE r.participant = 'agent'
    GROUP BY id
  ) AS ran ON ran.id = results.participants.agent
WHERE r.participant = 'agent'
GROUP BY results.participants.agent
ORDER BY resolved DESC;

-- name: Per repository (resolved share)
SELECT
  results.participants.agent AS id,
  i.repo AS repo,
  COUNT(*) AS instances,
  ROUND(AVG(CASE WHEN i.status = 'resolved' THEN 1.0 ELSE 0.0 END), 4) AS resolved
FROM results
  CROSS JOIN UNNEST(results.results) AS t(r)
  CROSS JOIN UNNEST(r.instances) AS u(i)
WHERE r.participant = 'agent'
GROUP BY id, repo
ORDER BY id, repo;
