"""run_distributed_test.py drives torch's own distributed suite: a script, not a pytest file."""

collect_ignore = ["run_distributed_test.py"]
