"""An evaluation: testbeds, the eval script's run, grading, the runner over rows,
and ``engine``, which assembles them for a local run."""
