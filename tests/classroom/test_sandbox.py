"""The sandbox each submission's kernel runs in (``sandbox.py``), and ``grade``
where none works.

* a sandboxed command sees, writes and reaches only what it is given: its folder
  writable, a bound one read-only, an unbound one absent, no network (a listener
  at 127.0.0.1 hears nothing), its own PIDs, only the environment it is given, the
  limits set; a file it writes stops at its size limit;
* ``grade --check-sandbox`` says which bwrap and whether it works;
* ``grade`` where no sandbox works stops and says why, and ``--no-sandbox`` warns
  and grades.

What the sandbox stops in a real grading run (the students of issue 47):
``test_grading.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys

import nbformat
import pandas as pd
import pytest
from grading_runs import NOTEBOOK, Listener, solution, student_rows, submission

from grpo_helpers import cli
from grpo_helpers.classroom import grading

#: Skipped, with the reason and the fix, where no sandbox starts (conftest.py).
SANDBOX = pytest.mark.usefixtures("needs_sandbox")
#: What a sandboxed command reports of the world it sees.
PROBE = """
import json, os, resource, socket, sys
port, mine, shared, hidden = sys.argv[1:]


def writes(path):
    try:
        with open(path, "a"):
            return True
    except OSError:
        return False


try:
    socket.create_connection(("127.0.0.1", int(port)), timeout=2).close()
    network = True
except OSError:
    network = False
print(json.dumps({
    "pid": os.getpid(),
    "writes its folder": writes(mine + "/file"),
    "writes the read-only one": writes(shared + "/file"),
    "sees the other": os.path.exists(hidden),
    "network": network,
    "environment": sorted(os.environ),
    "memory": resource.getrlimit(resource.RLIMIT_DATA)[0] // 2**20,
    "processes": resource.getrlimit(resource.RLIMIT_NPROC)[0],
}))
"""


@SANDBOX
def test_a_sandboxed_command_sees_only_what_it_is_given(tmp_path):
    """sandbox.command: its folder writable, a bound one read-only, an unbound
    one absent, no network (a listener at 127.0.0.1 hears nothing), its own PID
    namespace, only the environment it is given, the limits set."""
    from grpo_helpers.classroom import sandbox

    mine, shared, hidden = (tmp_path / name for name in ("mine", "shared", "hidden"))
    for folder in (mine, shared, hidden):
        folder.mkdir()
        (folder / "file").write_text("")
    listener = Listener()
    try:
        argv = [sys.executable, "-c", PROBE, str(listener.port)]
        line = sandbox.command(
            sandbox.find()[0],
            [*argv, str(mine), str(shared), str(hidden)],
            writable=[mine],
            read_only=[shared],
            chdir=mine,
            env={"PATH": "/usr/bin:/bin", "ONLY": "this"},
            limits=sandbox.Limits(memory_mb=512, processes=32),
        )
        done = subprocess.run(line, capture_output=True, text=True, timeout=60)
    finally:
        heard = listener.close()
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    # bubblewrap sets PWD, Python's locale coercion LC_CTYPE; nothing else comes
    environment = set(seen.pop("environment")) - {"PWD", "LC_CTYPE"}
    assert environment == {"ONLY", "PATH"}
    assert seen == {
        "pid": 2,  # 1 is bubblewrap's init
        "writes its folder": True,
        "writes the read-only one": False,
        "sees the other": False,
        "network": False,
        "memory": 512,
        "processes": 32,
    }
    assert heard == []


#: Writes 2 MiB into one file of its folder, in 64 KiB writes; prints how it ended.
BIG_FILE = """
import errno, sys
try:
    with open(sys.argv[1], "wb") as out:
        for _ in range(32):
            out.write(bytes(2**16))
    print("written")
except OSError as error:
    print(errno.errorcode[error.errno])
"""


@SANDBOX
def test_a_sandboxed_file_stops_growing_at_its_size_limit(tmp_path):
    """sandbox.command with a 1 MiB file limit (``RLIMIT_FSIZE``): a 2 MiB write
    into the command's own folder fails with EFBIG, and the file holds 1 MiB."""
    from grpo_helpers.classroom import sandbox

    big = tmp_path / "big"
    line = sandbox.command(
        sandbox.find()[0],
        [sys.executable, "-c", BIG_FILE, str(big)],
        writable=[tmp_path],
        env={"PATH": "/usr/bin:/bin"},
        limits=sandbox.Limits(file_mb=1),
    )
    done = subprocess.run(line, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout.strip()) == (0, "EFBIG"), done.stderr
    assert big.stat().st_size == 2**20


@SANDBOX
def test_check_sandbox_says_which_bwrap_and_whether_it_works(capsys, monkeypatch):
    assert cli.main(["grade", "--check-sandbox"]) == 0
    said = capsys.readouterr().out
    assert "sandbox: bubblewrap" in said and "it works" in said, said
    monkeypatch.setenv("GRPO_BWRAP", "/bin/false")
    assert cli.main(["grade", "--check-sandbox"]) == 1
    said = capsys.readouterr().out
    assert "/bin/false (from GRPO_BWRAP)" in said
    assert "it does not work: false failed" in said


def _broken_bwrap(tmp_path):
    """A bwrap that fails as it does where user namespaces are not allowed."""
    fake = tmp_path / "bwrap"
    fake.write_text(
        "#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n"
    )
    fake.chmod(0o755)
    return fake


def test_grade_without_a_working_sandbox_stops_and_says_why(
    tmp_path, monkeypatch, capsys
):
    """No grading starts; the message says what failed, why, and what to do."""
    monkeypatch.setenv("GRPO_BWRAP", str(_broken_bwrap(tmp_path)))
    (tmp_path / "submissions" / "ada").mkdir(parents=True)
    course_dir = tmp_path / "course"
    code = cli.main(
        ["grade", str(tmp_path / "submissions"), "--course", str(course_dir)]
    )
    assert code == 2
    said = capsys.readouterr().err
    assert "grade runs each submission in a sandbox, and no sandbox works here" in said
    if sys.platform.startswith("linux"):
        assert "setting up uid map: Permission denied" in said
    assert "Install bubblewrap" in said and "--no-sandbox" in said
    assert not course_dir.exists()  # nothing built, nothing graded


def test_grade_with_no_sandbox_warns_and_grades(edition, tmp_path, monkeypatch, capfd):
    """--no-sandbox grades where no sandbox works, and says what that means; and
    where the kernel the notebooks name (the project's) is not installed."""
    _, notebooks, course_dir = edition
    monkeypatch.setenv("GRPO_BWRAP", str(_broken_bwrap(tmp_path)))
    # where `make lab` installed the project's kernel (--user), hide it
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "no-user-kernels"))
    monkeypatch.delenv("JUPYTER_PATH", raising=False)
    folder = tmp_path / "submissions"
    (folder / "ada").mkdir(parents=True)
    solutions = [solution("smallest_group_size"), solution("success_advantage")]
    nbformat.write(
        submission(notebooks, solutions), folder / "ada" / f"{NOTEBOOK}.ipynb"
    )
    argv = ["grade", str(folder), "--course", str(course_dir), "--no-sandbox"]
    assert cli.main(argv) == 0
    assert grading.NO_SANDBOX in capfd.readouterr().err
    grades = pd.read_csv(course_dir / "grades.csv", keep_default_na=False)
    assert list(student_rows(grades, "ada")["points"]) == [1.0, 1.0]
