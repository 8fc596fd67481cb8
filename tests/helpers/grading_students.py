"""The students who hand in notebook 03 in the shared grading run: what each one's
exercise cells hold (``grading_runs.students`` puts them together).

* the cheats of issue 22 (carl, dora) and eve's call of the package's own
  function (:data:`PACKAGE_CALL`);
* the attacks of issue 38, each a student who must score zero: a second copy of
  the module, a rebuilt function, a re-import, a hunt for the expected values,
  IPython's transformers and exception handler, an alarm swallowed or cancelled,
  a process left running;
* the students of issue 47, who attack the machine or the watch: the snooper,
  the vandal, the caller, the signaller, the lingerer, the threader, the hog.

The tests that assert each student's rows are in ``tests/classroom/test_grading.py``.
"""

from __future__ import annotations

import textwrap

#: The cheats of issue 22: each exercise cell they hand in.
CHEATS = {
    "carl": [  # delegates to the teacher's loader; reads the solution file
        textwrap.dedent("""
            from grpo_helpers.classroom import course


            def smallest_group_size(pass_rate, max_degenerate):
                solutions = course._load_solutions("03_group_advantages")
                return solutions.smallest_group_size(pass_rate, max_degenerate)
        """),
        textwrap.dedent("""
            from grpo_helpers.settings import SETTINGS

            path = SETTINGS.project_root / "notebooks/solutions/03_group_advantages.py"
            exec(path.read_text())  # defines success_advantage
        """),
    ],
    "dora": [  # patches checks (the stub stays); hard-codes the visible examples
        textwrap.dedent("""
            from grpo_helpers.classroom import self_checks


            def always_ok(exercise, *args, **kwargs):
                print(f"{exercise}: ok")
                return True


            self_checks.self_check = self_checks.property_check = always_ok


            def smallest_group_size(pass_rate, max_degenerate):
                return None
        """),
        None,  # filled in by the fixture: the visible cases' values, literally
    ],
}

#: eve's second answer calls the package's own function, which the exercise rules
#: out (her first one never ends).
PACKAGE_CALL = textwrap.dedent("""
    def success_advantage(group_size, num_successes, scale="none"):
        rewards = [1.0] * num_successes + [0.0] * (group_size - num_successes)
        return advantages.group_advantages(rewards, scale=scale)[0]
""")


# The attacks of issue 38, each a student who must score zero. Each exercise cell
# below is what the student hands in; what the grader stops is in the comment.

#: A second copy of the module, loaded from its file; a function rebuilt from the
#: original's code before the hidden test swaps it.
FRESH_COPY = textwrap.dedent("""
    import importlib.util

    from grpo_helpers import advantages

    _spec = importlib.util.spec_from_file_location("_copy", advantages.__file__)
    _copy = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_copy)


    def smallest_group_size(pass_rate, max_degenerate):
        group_size = 2
        while _copy.degenerate_probability(pass_rate, group_size) > max_degenerate:
            group_size += 1
        return group_size
""")
REBUILT = textwrap.dedent("""
    import types

    from grpo_helpers import advantages

    _original = advantages.group_advantages
    _rebuilt = types.FunctionType(
        _original.__code__, _original.__globals__, "mine", _original.__defaults__
    )
    _rebuilt.__kwdefaults__ = _original.__kwdefaults__


    def success_advantage(group_size, num_successes, scale="none"):
        rewards = [1.0] * num_successes + [0.0] * (group_size - num_successes)
        return float(_rebuilt(rewards, scale=scale)[0])
""")
#: A re-import, with the module the package had put back where it was.
REIMPORT = textwrap.dedent("""
    import importlib
    import sys

    import grpo_helpers

    _kept = sys.modules.pop("grpo_helpers.advantages")
    _again = importlib.import_module("grpo_helpers.advantages")
    sys.modules["grpo_helpers.advantages"] = grpo_helpers.advantages = _kept


    def smallest_group_size(pass_rate, max_degenerate):
        group_size = 2
        while _again.degenerate_probability(pass_rate, group_size) > max_degenerate:
            group_size += 1
        return group_size
""")
#: Looks for the expected values wherever the kernel could hold them: the stack
#: (the hidden test's frames), IPython's history, the line cache, any database
#: in or under the working folder (the gradebook); the visible cases, literally.
HUNT = textwrap.dedent("""
    import ast
    import glob
    import linecache
    import os
    import re
    import sqlite3
    import sys

    VISIBLE = {visible!r}


    def _texts():
        texts = [str(t) for t in get_ipython().user_ns.get("In", [])]
        texts += ["".join(e[2]) for e in list(linecache.cache.values()) if len(e) > 2]
        for top in {{os.getcwd(), os.environ.get("PWD", ".")}}:
            for path in glob.glob(os.path.join(top, "**", "*.db"), recursive=True):
                try:
                    db = sqlite3.connect(path)
                    names = db.execute("select name from sqlite_master")
                    for table in [r[0] for r in names]:
                        for row in db.execute(f"select * from '{{table}}'"):
                            texts += [v for v in row if isinstance(v, str)]
                except Exception:
                    pass
        return texts


    def _hunt(args):
        frame = sys._getframe(1)
        while frame is not None:
            found = frame.f_locals
            if "want" in found and "case" in found:
                return found["want"]
            frame = frame.f_back
        for text in _texts():
            found = r"cases=(\\[.*?\\]),\\s*expected=(\\[.*?\\])"
            for cases, expected in re.findall(found, text, re.S):
                try:
                    cases = ast.literal_eval(cases)
                    expected = ast.literal_eval(expected)
                except (ValueError, SyntaxError):
                    continue
                for case, want in zip(cases, expected):
                    if tuple(case) == tuple(args):
                        return want
        return None


    def success_advantage(group_size, num_successes, scale="none"):
        args = (group_size, num_successes, scale)
        return VISIBLE[args] if args in VISIBLE else _hunt(args)
""")
#: Installed by an earlier cell: an input transformer that empties exercise 1's
#: forbid list, an AST transformer that empties exercise 2's; the answers call
#: the forbidden functions.
INPUT_TRANSFORMER = textwrap.dedent("""
    import re

    from grpo_helpers import advantages


    def _open_up(lines):
        text = "".join(lines)
        if "Hidden tests of smallest_group_size" in text:
            text = re.sub(r"forbid=\\[.*?\\],\\n", "forbid=[],\\n", text, flags=re.S)
            marks = r"fingerprints=\\{.*?\\},\\n"
            text = re.sub(marks, "fingerprints={},\\n", text, flags=re.S)
        return text.splitlines(keepends=True)


    get_ipython().input_transformers_cleanup.append(_open_up)


    def smallest_group_size(pass_rate, max_degenerate):
        group_size = 2
        while advantages.degenerate_probability(pass_rate, group_size) > max_degenerate:
            group_size += 1
        return group_size
""")
AST_TRANSFORMER = textwrap.dedent("""
    import ast

    from grpo_helpers import advantages


    class _OpenUp(ast.NodeTransformer):
        def visit_Call(self, node):
            self.generic_visit(node)
            if getattr(node.func, "id", "") == "run_hidden_tests":
                for keyword in node.keywords:
                    if keyword.arg == "forbid":
                        keyword.value = ast.List(elts=[], ctx=ast.Load())
                    if keyword.arg == "fingerprints":
                        keyword.value = ast.Dict(keys=[], values=[])
            return node


    get_ipython().ast_transformers.append(_OpenUp())


    def success_advantage(group_size, num_successes, scale="none"):
        rewards = [1.0] * num_successes + [0.0] * (group_size - num_successes)
        return float(advantages.group_advantages(rewards, scale=scale)[0])
""")
#: A custom exception handler that silences every error, stubs for answers.
CUSTOM_EXC = textwrap.dedent("""
    def _quiet(shell, etype, value, tb, tb_offset=None):
        return None


    get_ipython().set_custom_exc((BaseException,), _quiet)


    def smallest_group_size(pass_rate, max_degenerate):
        return None
""")
STUB_2 = textwrap.dedent("""
    def success_advantage(group_size, num_successes, scale="none"):
        return None
""")
#: Endless loops that swallow the alarm, or cancel it (they wait rather than
#: spin, to leave the cores to the other students).
SWALLOWS = textwrap.dedent("""
    import time


    def smallest_group_size(pass_rate, max_degenerate):
        while True:
            try:
                time.sleep(1)
            except BaseException:  # the alarm too
                continue
""")
CANCELS = textwrap.dedent("""
    import signal
    import time


    def smallest_group_size(pass_rate, max_degenerate):
        signal.setitimer(signal.ITIMER_REAL, 0)  # no alarm
        while True:
            time.sleep(1)
""")
#: A process in a session of its own that outlives the notebook and rewrites
#: the grades: this student's results file, then the grades file. It marks its
#: own folder (``kit-canary``) to show that it ran.
LEFTOVER = textwrap.dedent('''
    import os
    import subprocess
    import sys
    import time

    FORGE = """
    import json, pathlib, time
    course, canary = pathlib.Path({course!r}), pathlib.Path("kit-canary")
    grades = {{"exercise-1": [1.0, 1.0], "exercise-2": [1.0, 1.0]}}
    forged = {{"notebooks": {{"{notebook}": {{"grades": grades, "errors": {{}}}}}}}}
    for _ in range(900):
        time.sleep(0.1)
        with open(canary, "a") as out:
            out.write(".")
        if (course / "results").is_dir():
            (course / "results" / "kit.json").write_text(json.dumps(forged))
        if (course / "grades.csv").is_file():
            with open(course / "grades.csv", "a") as out:
                out.write("kit,forged\\\\n")
    """
    subprocess.Popen(
        [sys.executable, "-c", FORGE, {marker!r}],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(300):  # until it runs (a loaded machine starts it slowly)
        if os.path.exists("kit-canary"):
            break
        time.sleep(0.1)
    print("kit's forger runs:", os.path.exists("kit-canary"))


    def smallest_group_size(pass_rate, max_degenerate):
        return None
''')

# The students of issue 47, who attack the machine or the watch. Each cell starts
# with the constants the test gives it (``TARGETS``: absolute paths it should not
# reach; ``VISIBLE``: the visible cases' values); each prints what it got, and
# answers with whatever it found (so that anything found would earn points).

#: Reads the key, the solutions and another student's submission: by the
#: absolute paths it was given, and wherever walking up from the package's file,
#: its working folder (the notebook's) and the Python installation leads.
SNOOPER_1 = textwrap.dedent("""
    import json
    import os
    import stat
    import sys
    from pathlib import Path

    import grpo_helpers

    LOOK_FOR = [
        "notebooks/solutions/03_group_advantages.py",
        "build/grading/hidden_key.json",
        "hidden_key.json",
        "gradebook.db",
        "grpo-grader-*/gradebook.db",
        "grpo-grader-*/nbgrader/submitted/*/*/*.ipynb",
        "*/ada/03_group_advantages.ipynb",
    ]
    found = list(TARGETS)
    for start in (grpo_helpers.__file__, os.getcwd(), sys.prefix):
        for folder in Path(start).resolve().parents:
            for pattern in LOOK_FOR:
                found += [str(path) for path in folder.glob(pattern)]
    READ = {}
    for path in found:
        try:
            READ[path] = Path(path).read_bytes()
        except OSError:
            pass
    print("the snooper read:", json.dumps(sorted(READ)))
    HELD = set()  # files open in the sandbox: its own and its init's
    for pid in ("self", "1"):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if stat.S_ISREG(os.stat(f"/proc/{pid}/fd/{fd}").st_mode):
                    HELD.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
            except OSError:
                pass
    print("the snooper holds:", json.dumps(sorted(HELD)))
    KEYS = []
    for path, text in READ.items():
        if path.endswith(".json"):
            KEYS += [entry for nb in json.loads(text).values() for entry in nb.values()]
        if path.endswith(".py"):
            exec(text.decode())  # the solutions: smallest_group_size among them
    if "smallest_group_size" not in globals():

        def smallest_group_size(pass_rate, max_degenerate):
            return None
""")
SNOOPER_2 = textwrap.dedent("""
    def success_advantage(group_size, num_successes, scale="none"):
        case = (group_size, num_successes, scale)
        if case in VISIBLE:
            return VISIBLE[case]
        for entry in KEYS:  # the key, had it been read
            shown = entry["shown"]
            if entry["exercise"] == "success_advantage" and repr(case) in shown:
                return entry["expected"][shown.index(repr(case))]
        return None
""")
#: Writes into the gradebook, the key, another submission, the source notebooks
#: (appends to them) and the project's notebooks folder (a new file); makes the
#: grader's watch file a link to the key. Asks, writing nothing, whether it could
#: write what the next kernel imports or reads: the package, the data, the model
#: cache's entries and the Python installation (its working folder, the control).
VANDAL = textwrap.dedent("""
    import os
    import sys
    import sysconfig
    from pathlib import Path

    import grpo_helpers
    from grpo_helpers.settings import SETTINGS

    found = list(TARGETS)
    for start in (grpo_helpers.__file__, os.getcwd()):
        for folder in Path(start).resolve().parents:
            for pattern in ("grpo-grader-*/gradebook.db", "grpo-grader-*/*.json"):
                found += [str(path) for path in folder.glob(pattern)]
    WROTE = []
    for path in found:
        try:
            with open(path, "ab") as out:
                out.write(b"the vandal was here")
            WROTE.append(path)
        except OSError:
            pass
    for path in NEW_FILES:
        try:
            Path(path).write_text("the vandal was here")
            WROTE.append(path)
        except OSError:
            pass
    print("the vandal wrote:", sorted(WROTE))
    SHARED = [Path(grpo_helpers.__file__).parent, SETTINGS.project_root / "data"]
    MODELS = Path(SETTINGS.cache_dir) / "models"
    if MODELS.is_dir():
        SHARED += sorted(p for p in MODELS.iterdir() if p.is_dir())
    SHARED += [Path(sys.prefix), Path(sys.exec_prefix)]
    SHARED += [Path(sysconfig.get_paths()[k]) for k in ("stdlib", "purelib", "platlib")]
    SHARED = sorted({str(p) for p in SHARED if p.is_dir()})
    print("the vandal checked:", SHARED + [os.getcwd()])
    print("the vandal could write:", [p for p in SHARED if os.access(p, os.W_OK)])
    print("the vandal could write its folder:", os.access(os.getcwd(), os.W_OK))
    # the grader's watch file, in the kernel's folder, made a link to the key:
    # a grader that writes it would write the key
    WATCH = os.environ.get("GRPO_GRADING_WATCH", "")
    if os.path.lexists(WATCH):
        os.unlink(WATCH)
    os.symlink(TARGETS[1], WATCH)
    print("the vandal linked:", WATCH, "->", os.readlink(WATCH))


    def smallest_group_size(pass_rate, max_degenerate):
        return None
""")
#: Connects to a port the test listens on at 127.0.0.1; resolves a host name.
CALLER = textwrap.dedent("""
    import socket

    GOT = []
    try:
        with socket.create_connection(("127.0.0.1", PORT), timeout=5) as line:
            line.sendall(b"the caller was here")
        GOT.append("connected")
    except OSError as error:
        GOT.append(f"no connection: {error}")
    try:
        GOT.append(f"resolved: {socket.getaddrinfo('pypi.org', 443)[0][4]}")
    except OSError as error:
        GOT.append(f"no name resolution: {error}")
    print("the caller got:", GOT)


    def smallest_group_size(pass_rate, max_degenerate):
        return None
""")
#: Prints 25 MB, past what a notebook may print (20 MB).
FLOOD = textwrap.dedent("""
    print("x" * 25 * 2**20)


    def success_advantage(group_size, num_successes, scale="none"):
        return None
""")
#: Stops and kills its parent, a process of the teacher's (``BYSTANDER``) and
#: every process it can list (outside a sandbox, where it lists the machine's,
#: only the first two: a broken sandbox fails the test, not the machine).
SIGNALLER = textwrap.dedent("""
    import os
    import signal

    listed = {int(entry) for entry in os.listdir("/proc") if entry.isdigit()}
    targets = {os.getppid(), BYSTANDER, *listed} - {os.getpid()}
    if len(listed) > 50:
        targets = {os.getppid(), BYSTANDER}
    SENT = []
    for pid in sorted(targets):
        for number in (signal.SIGSTOP, signal.SIGKILL):
            try:
                os.kill(pid, number)
                SENT.append(f"{number.name} {pid}")
            except OSError:
                pass
    print("the signaller sent:", SENT)


    def smallest_group_size(pass_rate, max_degenerate):
        return None
""")
#: Leaves a detached process that waits, then writes into the course directory
#: again and again.
LINGERER = textwrap.dedent('''
    import subprocess
    import sys

    LINGER = f"""
    import time
    time.sleep(3)  # until its notebook has ended
    for _ in range(600):
        for path in {TARGETS!r}:
            try:
                with open(path, "a") as out:
                    out.write("the lingerer was here\\\\n")
            except OSError:
                pass
        time.sleep(0.1)
    """
    subprocess.Popen(
        [sys.executable, "-c", LINGER, MARKER],
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    print("the lingerer left a process")


    def smallest_group_size(pass_rate, max_degenerate):
        return None
''')
#: A copy of the module loaded before the hidden test, called from a thread the
#: answer starts (only the watch the hidden test sets on new threads sees it).
ON_A_NEW_THREAD = textwrap.dedent("""
    import importlib.util
    import threading

    from grpo_helpers import advantages

    _spec = importlib.util.spec_from_file_location("_copy", advantages.__file__)
    _copy = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_copy)


    def smallest_group_size(pass_rate, max_degenerate):
        got = []

        def search():
            group_size = 2
            while _copy.degenerate_probability(pass_rate, group_size) > max_degenerate:
                group_size += 1
            got.append(group_size)

        thread = threading.Thread(target=search)
        thread.start()
        thread.join()
        return got[0] if got else None
""")
#: The package's function, run by a process pool whose worker was started
#: before the hidden test (no process starts during it).
IN_A_PROCESS_POOL = textwrap.dedent("""
    import concurrent.futures
    import multiprocessing

    from grpo_helpers import advantages

    POOL = concurrent.futures.ProcessPoolExecutor(
        1, mp_context=multiprocessing.get_context("fork")
    )
    POOL.submit(int, 0).result()  # its worker runs from here on


    def success_advantage(group_size, num_successes, scale="none"):
        rewards = [1.0] * num_successes + [0.0] * (group_size - num_successes)
        done = POOL.submit(advantages.group_advantages, rewards, scale=scale)
        return float(done.result()[0])
""")
#: Asks for 16 GiB (numpy's zeros: pages untouched, so no harm where it is
#: allowed); then forks until refused (at most 2000 times).
MEMORY_HOG = textwrap.dedent("""
    import numpy as np

    try:
        HOG = np.zeros(16 * 2**30, dtype=np.uint8)
        print("the hog got 16 GiB")
    except MemoryError as error:
        print(f"the hog was refused memory: {error}")
        raise


    def smallest_group_size(pass_rate, max_degenerate):
        return None
""")
FORK_HOG = textwrap.dedent("""
    import os
    import time

    forked = 0
    try:
        for _ in range(2000):
            if os.fork() == 0:
                time.sleep(600)
                os._exit(0)
            forked += 1
        print(f"the hog forked {forked} processes, never refused")
    except OSError as error:
        print(f"the hog was refused after {forked} processes: {error}")
        raise


    def success_advantage(group_size, num_successes, scale="none"):
        return None
""")
