"""Tests of the core of ``grpo_helpers``: its top-level modules."""
