"""Pilot: notebook 05's defaults with a reward that pays only a *worked* right answer.

The two seeds that stalled at notebook 05's defaults (2 and 9) learned to box a
bare guess: most of the few completions the binary reward paid in their first 30
steps were lucky guesses such as ``\\boxed{3}`` with no working
(``bench/results/stall-resume/README.md``). This pilot asks whether a reward that
does not pay a lucky guess avoids that. ``worked`` pays 1.0 for a boxed right answer
that is the result of an expression the completion writes (``a op b = c``, with
``c`` the answer, not copied from the prompt's worked example:
``answers.classify``'s reading of "computed") and 0.0 for anything else.

The pilots ran with ``worked`` defined in this script; it is now the package's
``rewards.worked_reward`` (the same definition: ``tests/test_rewards.py`` recomputes
every reward these pilots recorded), so this script is ``bench/cpu_grpo_demo.py
--reward worked``, kept so that the recorded commands still run.
Score pilots on the validation split::

    python bench/pilot_worked_reward.py --preset notebook --split validation \\
        --eval-at 0 --gsm8k-questions 0 --prompt-baselines 0 --seeds 2 \\
        --out bench/results/pilot-worked-reward --runs runs/pilot-worked-reward
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> None:
    import cpu_grpo_demo

    cpu_grpo_demo.main(["--reward", "worked", *argv])


if __name__ == "__main__":
    main(sys.argv[1:])
