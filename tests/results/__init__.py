"""Tests of ``grpo_helpers.results``."""
