"""Errors a rollout raises while it runs (the workcell reports each as an error envelope)."""

from __future__ import annotations


class AsyncRtcRefused(RuntimeError):
    """async_rtc=True with a policy whose one-action chunks could never be applied."""


class RecordingFrameError(RuntimeError):
    """Raised by an on_frame callback when a frame could not be recorded: data loss, fatal."""
