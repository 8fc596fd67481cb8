"""grpo_helpers.classroom.loop_check: the run a learner's loop is held to holds
every case a wrong loop changes (the wrong loops themselves fail in
``test_self_checks.py``, ``train_loop``)."""

from __future__ import annotations

from grpo_helpers.classroom import loop_check


def test_the_loop_checks_run_holds_every_case_a_wrong_loop_needs(tmp_path):
    """The check's run (``loop_check.CHECK_RUN``) must hold what each wrong loop
    changes: an update before a later step's samples (a stale sampler), a
    degenerate group beside a teaching one (sent or skipped), a step with two
    teaching groups (one optim_step per group), and group rewards whose spread is
    not 1 (std scaling changes them)."""
    from grpo_helpers import run_files, training

    config = loop_check.check_config(tmp_path / "run")
    metrics = training.train_sync(config, progress=False).metrics
    assert metrics["updated"].iloc[:-1].any()
    mixed = metrics[(metrics["skipped_groups"] > 0) & (metrics["valid_groups"] > 0)]
    assert len(mixed), "no step has a degenerate group beside a teaching one"
    assert (metrics["valid_groups"] >= 2).any(), "no step has two teaching groups"
    samples = run_files.load_samples(tmp_path / "run")
    spread = samples.groupby(["step", "question_index"])["reward"].std(ddof=0)
    assert ((spread > 0) & ((spread - 1).abs() > 0.1)).any()
