"""Tests of ``grpo_helpers.classroom``."""
