"""Example jobs on Braid and Spark."""
