"""Worked examples of tasks that plug into the framework without editing it."""
