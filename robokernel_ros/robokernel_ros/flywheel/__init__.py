"""The flywheel: collect expert demonstrations, export them, train with LeRobot, serve the
checkpoint back, and compare it with the expert and an untrained twin (see `loop`)."""

from .loop import FlywheelConfig, FlywheelResult, PolicyResult, comparison_table, run_flywheel

__all__ = ["FlywheelConfig", "FlywheelResult", "PolicyResult", "comparison_table", "run_flywheel"]
