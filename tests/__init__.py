"""The test suite: one folder per wing of ``grpo_helpers`` (tests/README.md).

Each folder is a package, so that two folders may hold test files of the same
name (``tests/core/test_x.py`` and ``tests/local/test_x.py``).
"""
