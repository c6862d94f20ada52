"""The flywheel: collect expert demonstrations, export them, train with LeRobot, serve the
checkpoint back, and compare it with the expert and an untrained twin (see `loop`); then,
with `dagger_rounds`, DAgger rounds: deploy with the simulated operator, add its
corrections, retrain (see `dagger`)."""

from .loop import FlywheelConfig, FlywheelResult, PolicyResult, comparison_table, run_flywheel

__all__ = ["FlywheelConfig", "FlywheelResult", "PolicyResult", "comparison_table", "run_flywheel"]
