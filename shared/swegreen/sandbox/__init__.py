"""Where participant code runs (bubblewrap or process isolation, seccomp, limits)
and the guards around it (tests put back, the environment kept, pytest's own record)."""
