"""Tests of the notebooks: their text, their solutions, their execution."""
