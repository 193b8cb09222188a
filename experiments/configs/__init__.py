"""Experiment configs: each file's `get_config()` starts from workflows/base_config.py."""
