"""Tests of ``grpo_helpers.local``, the local engine."""
