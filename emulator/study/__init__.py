"""Studies: experiment files, the runner, results, the report, PFC analysis of captures, built-in experiments."""
