"""Pilot: notebook 05's defaults with a reward that pays only a *worked* right answer.

The two seeds that stalled at notebook 05's defaults (2 and 9) learned to box a
bare guess: most of the few completions the binary reward paid in their first 30
steps were lucky guesses such as ``\\boxed{3}`` with no working
(``bench/results/stall-resume/README.md``). This pilot asks whether a reward that
does not pay a lucky guess avoids that. ``worked`` pays 1.0 for a boxed right answer
that is the result of an expression the completion writes (``a op b = c``, with
``c`` the answer, not copied from the prompt's worked example:
``answers.classify``'s reading of "computed") and 0.0 for anything else.

It is a pilot, not a package reward: this script adds ``worked`` to the reward
table of its own process and runs ``bench/cpu_grpo_demo.py`` with every other
argument as given. Score pilots on the validation split::

    python bench/pilot_worked_reward.py --preset notebook --split validation \\
        --eval-at 0 --gsm8k-n 0 --prompt-baselines 0 --seeds 2 \\
        --out bench/results/pilot-worked-reward --runs runs/pilot-worked-reward
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from grpo_helpers import answers, config, prompts, rewards  # noqa: E402


def worked_reward(response: str, ground_truth: str) -> float:
    r"""1.0 for a boxed right answer computed by an expression the completion writes.

    Example:
        >>> worked_reward(r"3 + 4 = 7 apples. \boxed{7}", "7")
        1.0
        >>> worked_reward(r"\boxed{7}", "7")  # a right guess, with no working
        0.0
        >>> worked_reward(r"3 + 4 = 7. \boxed{8}", "7")
        0.0
    """
    answer = rewards.extract_boxed(response)
    if not rewards.answers_match(answer, ground_truth):
        return 0.0
    computed = answers._computes(response, answer, prompts.FEWSHOT_PREFIX)
    return 1.0 if computed else 0.0


def main(argv: list[str]) -> None:
    rewards.REWARD_FUNCTIONS["worked"] = worked_reward
    config.REWARDS = (*config.REWARDS, "worked")
    import cpu_grpo_demo

    cpu_grpo_demo.main(["--reward", "worked", *argv])


if __name__ == "__main__":
    main(sys.argv[1:])
