"""grpo_helpers.local.worker: every torch job of the local engine on one compute
thread. Sampling batches and training calls run there in the order submitted; a
job the compute thread submits runs in place, so nothing waits for itself; a
forked child starts a compute thread of its own."""

from __future__ import annotations

import os
import threading

import pytest
import pytrio as trio
from local_engine import grpo_datum, new_client, sample_one

from grpo_helpers.local import worker


def test_a_job_submitted_from_the_compute_thread_runs_in_place():
    """Nested submissions run at once on the compute thread; their errors reach
    the caller's future, not the thread."""

    def nested() -> tuple[bool, int, str]:
        inner = worker.submit(threading.get_ident)
        failing = worker.submit(int, "not a number")
        with pytest.raises(ValueError, match="not a number"):
            failing.result()
        return inner.done(), inner.result(), type(failing.exception()).__name__

    done, ident, error = worker.run(nested)
    assert done and error == "ValueError"
    assert ident == worker.submit(threading.get_ident).result() != threading.get_ident()
    assert not worker.on_compute_thread()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this system")
def test_a_forked_child_runs_its_jobs_on_a_compute_thread_of_its_own():
    """The parent's compute thread does not exist in a forked child (only the
    forking thread is copied): the child's jobs run on a thread it starts, and
    are not queued for the parent's, where they would wait forever."""
    parent = worker.submit(threading.get_ident).result()  # the thread has started
    pid = os.fork()
    if pid == 0:  # the child: report through the exit code, never return to pytest
        code = 3
        try:
            ident = worker.submit(threading.get_ident).result(timeout=20)
            code = 0 if ident != threading.get_ident() else 1
        except BaseException:  # noqa: BLE001 - a job that never ran: TimeoutError
            code = 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "2: the job waited forever"
    assert worker.submit(threading.get_ident).result() == parent  # the parent's own


def test_every_engine_job_runs_on_the_one_compute_thread(svc, tok, monkeypatch):
    """Sampling batches and every training client's calls run on the engine's one
    compute thread (``local.worker``: one OpenMP team for the process), in the
    order submitted; a collected client's queued calls still run; a sample that the
    compute thread itself waits for does not wait forever."""
    import gc
    import threading

    from grpo_helpers.local import host as host_module
    from grpo_helpers.local import worker

    seen: list[tuple[str, int]] = []
    generate = host_module.generate

    def recorded_generate(*args, **kwargs):
        seen.append(("sample", threading.get_ident()))
        return generate(*args, **kwargs)

    monkeypatch.setattr(host_module, "generate", recorded_generate)
    tcs = [new_client(svc, seed=4), new_client(svc, seed=5)]
    prompt, seq = sample_one(tcs[0].save_weights_and_get_sampling_client(), tok)
    for n, tc in enumerate(tcs):
        run_forward = tc._run_forward

        def recorded(*args, n=n, run_forward=run_forward):
            seen.append((f"train {n}", threading.get_ident()))
            return run_forward(*args)

        monkeypatch.setattr(tc, "_run_forward", recorded)
        tc.forward_backward([grpo_datum(prompt, seq, 1.0)], "importance_sampling")
    pending = tcs[1].optim_step(trio.AdamParams(learning_rate=1e-2))  # still queued
    del tcs, tc
    gc.collect()
    assert pending.result().metrics["step"] == 1.0  # queued calls still run
    compute = worker.submit(threading.get_ident).result()
    assert [name for name, _ in seen] == ["sample", "train 0", "train 1"]
    assert {ident for _, ident in seen} == {compute} != {threading.get_ident()}
    # A sample waited for on the compute thread itself is decoded there, at once.
    sampler = new_client(svc, seed=6).save_weights_and_get_sampling_client()
    nested = worker.submit(sample_one, sampler, tok).result(timeout=120)
    assert nested[1] and seen[-1] == ("sample", compute)
