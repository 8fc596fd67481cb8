"""A CPU run that shows GRPO working: SmolLM2-135M on arithmetic word problems.

End to end, on the local engine, in one process:

1. evaluate the base model (greedy) on held-out problems it will never train on;
2. train with GRPO (the async loop) on disjoint training problems;
3. evaluate the trained checkpoint on the same held-out problems;
4. save a plot (reward and accuracy per step, and both evaluations) as PNG and the
   numbers as JSON in the run directory;
5. print one final line: before / after exact accuracy with 95% Wilson intervals
   and the McNemar p-value (lenient accuracy too, so a format gain is visible).

    python bench/cpu_grpo_demo.py                 # the measured settings (~25 min)
    python bench/cpu_grpo_demo.py --steps 2 --eval-n 20   # a smoke run

Every number printed is measured in this run; nothing is hard-coded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from grpo_helpers import evaluation, plotting, training  # noqa: E402
from grpo_helpers.config import GRPOConfig  # noqa: E402
from grpo_helpers.engines import connect  # noqa: E402


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base-model", default="HuggingFaceTB/SmolLM2-135M-Instruct")
    p.add_argument("--difficulty", type=int, default=1)
    p.add_argument("--steps", type=int, default=24)
    p.add_argument("--batch-size", type=int, default=2)
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--learning-rate", type=float, default=2e-4)
    p.add_argument("--lora-rank", type=int, default=16)
    p.add_argument("--reward", default="shaped", choices=("binary", "shaped"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eval-n", type=int, default=200, help="held-out problems")
    p.add_argument("--eval-max-tokens", type=int, default=48)
    p.add_argument("--run-dir", default="runs/cpu-grpo-demo")
    return p.parse_args()


def main() -> None:
    args = parse_args()
    started = time.time()
    config = GRPOConfig(
        base_model=args.base_model,
        backend="local",
        dataset="arithmetic",
        difficulty=args.difficulty,
        steps=args.steps,
        batch_size=args.batch_size,
        group_size=args.group_size,
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        learning_rate=args.learning_rate,
        lora_rank=args.lora_rank,
        reward=args.reward,
        seed=args.seed,
        weights_name="cpu-grpo-demo",
        run_dir=args.run_dir,
        save_every=5,
    )
    run_dir = Path(args.run_dir)
    service = connect("local", run_dir=run_dir / "checkpoints")
    held_out = training.load_split(config, "test").select(range(args.eval_n))
    eval_kwargs = dict(temperature=0.0, max_tokens=args.eval_max_tokens, concurrency=16)

    base_sampler = service.create_sampling_client(base_model=config.model_name)
    tokenizer = base_sampler.get_tokenizer()
    base = evaluation.evaluate(
        base_sampler, tokenizer, held_out, name="base", **eval_kwargs
    )
    print(evaluation.format_results_table([base]), flush=True)

    t_train = time.time()
    result = asyncio.run(training.train_async(config, service, overwrite=True))
    train_seconds = time.time() - t_train

    trained_sampler = service.create_sampling_client(
        base_model=config.model_name, model_path=result.weights_path
    )
    trained = evaluation.evaluate(
        trained_sampler, tokenizer, held_out, name="GRPO", **eval_kwargs
    )
    exact = evaluation.compare(base, trained, "exact", names=("base", "GRPO"))
    lenient = evaluation.compare(base, trained, "lenient", names=("base", "GRPO"))
    print(evaluation.format_results_table([base, trained], exact))
    print(lenient.summary_line())

    fig, axes = plt.subplots(1, 2, figsize=(12, 4), layout="constrained")
    plotting.plot_training_curves(result.metrics, ax=axes[0])
    plotting.plot_accuracy_comparison(
        evaluation.accuracy_rows([base, trained]), ax=axes[1]
    )
    axes[1].set_title(f"Held-out arithmetic problems (n={args.eval_n}), greedy")
    png = run_dir / "cpu_grpo_demo.png"
    fig.savefig(png, dpi=110)
    total_seconds = time.time() - started
    numbers = {
        "settings": vars(args),
        "base": {
            k: base.summary[k]
            for k in (
                "exact_acc",
                "exact_ci",
                "lenient_acc",
                "lenient_ci",
                "boxed_frac",
                "n",
            )
        },
        "trained": {
            k: trained.summary[k]
            for k in (
                "exact_acc",
                "exact_ci",
                "lenient_acc",
                "lenient_ci",
                "boxed_frac",
                "n",
            )
        },
        "exact_p_value": exact.p_value,
        "lenient_p_value": lenient.p_value,
        "train_seconds": train_seconds,
        "total_seconds": total_seconds,
        "weights_path": result.weights_path,
    }
    (run_dir / "cpu_grpo_demo.json").write_text(json.dumps(numbers, indent=2))
    b, t = base.summary, trained.summary
    print(
        f"RESULT held-out n={args.eval_n}: exact {b['exact_acc']:.1%} "
        f"[{b['exact_ci'][0]:.1%}, {b['exact_ci'][1]:.1%}] -> {t['exact_acc']:.1%} "
        f"[{t['exact_ci'][0]:.1%}, {t['exact_ci'][1]:.1%}] (McNemar p = "
        f"{exact.p_value:.2g}); lenient {b['lenient_acc']:.1%} -> "
        f"{t['lenient_acc']:.1%} (p = {lenient.p_value:.2g}); training "
        f"{train_seconds / 60:.1f} min, total {total_seconds / 60:.1f} min; "
        f"plot {png}"
    )


if __name__ == "__main__":
    main()
