"""Tests of the project as a whole: layout, set-up, front door, claims, benches."""
