"""Tests of ``grpo_helpers.trl``."""
