r"""Prompts: the few-shot prefix, the question suffix and chat-template rendering.

Every question is sent as the last user turn of a short chat:

1. a worked example (the demo scripts' "How many r's are in strawberry?"), whose
   assistant turn shows the expected shape: an empty ``<think>`` block, short
   reasoning, and the final answer in ``\boxed{}``;
2. the question followed by :data:`QUESTION_SUFFIX`, which asks for a bare number
   inside ``\boxed{}`` so that the reward can find and parse it.

The chat is rendered with the tokenizer's chat template (``add_generation_prompt=True``
leaves the assistant turn open for the model; ``enable_thinking=False`` is read by
templates that have a thinking switch, such as Qwen3's, and ignored by others), then
encoded *without* adding special tokens again: the template already wrote them.

Introduced in: 01_gsm8k_dataset.ipynb (rendering) and 02_reward_design.ipynb (why the
answer goes in a box).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "ARITHMETIC_EXAMPLE",
    "FEWSHOT_PREFIX",
    "PROMPT_EXAMPLES",
    "QUESTION_SUFFIX",
    "build_messages",
    "build_prompt",
    "example_answer",
    "get_stop_sequences",
]

#: Appended to every question: asks for a unit-free number inside ``\boxed{}``.
QUESTION_SUFFIX = " Provide a numerical answer without units, written inside \\boxed{}."

#: One worked example (user + assistant turns), exactly as in the demo scripts.
FEWSHOT_PREFIX: list[dict[str, str]] = [
    {"role": "user", "content": "How many r's are in strawberry?" + QUESTION_SUFFIX},
    {
        "role": "assistant",
        "content": (
            "<think>\n\n</think>\n\n"
            "Let's spell the word out and number all the letters: "
            "1) s 2) t 3) r 4) a 5) w 6) b 7) e 8) r 9) r 10) y. "
            "We have r's at positions 3, 8, and 9. "
            "There are three r's. \\boxed{3}"
        ),
    },
]


#: A worked example in the arithmetic problems' own style, for the prompt-only
#: baseline of notebook 08 (one arithmetic example in place of the strawberry one).
#: Its name is outside the generator's (``arithmetic.make_arithmetic_problems`` has
#: no "Mia"), so it is never one of the held-out questions; its numbers are in the
#: generator's range, so a copy of it can be graded right by chance.
ARITHMETIC_EXAMPLE: list[dict[str, str]] = [
    {
        "role": "user",
        "content": "Mia has 12 stickers. She gets 5 more stickers. How many "
        "stickers does Mia have now?" + QUESTION_SUFFIX,
    },
    {
        "role": "assistant",
        "content": "<think>\n\n</think>\n\nMia has 12 + 5 = 17 stickers now. "
        "\\boxed{17}",
    },
]

#: The prompts notebook 08 compares, by name: the series' own (the strawberry
#: example), one arithmetic example instead, and no example at all.
PROMPT_EXAMPLES: dict[str, list[dict[str, str]]] = {
    "strawberry example": FEWSHOT_PREFIX,
    "arithmetic example": ARITHMETIC_EXAMPLE,
    "zero-shot": [],
}


def build_messages(
    question: str, fewshot: Sequence[Mapping[str, str]] = FEWSHOT_PREFIX
) -> list[dict[str, str]]:
    """The chat for one question: the few-shot example, then the question + suffix.

    Args:
        question: a GSM8K question (non-empty).
        fewshot: the worked example's turns (default the demo scripts'
            strawberry example; ``[]`` asks the question alone).

    Returns:
        Three messages (``role``/``content`` dicts): user, assistant, user. They are
        fresh copies, so changing them does not change :data:`FEWSHOT_PREFIX`.

    Raises:
        ValueError: the question is empty or only whitespace.
        TypeError: the question is not a string.

    Introduced in: 01_gsm8k_dataset.ipynb

    Example:
        >>> messages = build_messages("What is 2 + 3?")
        >>> [m["role"] for m in messages]
        ['user', 'assistant', 'user']
        >>> messages[-1]["content"].endswith("inside \\\\boxed{}.")
        True
    """
    if not isinstance(question, str):
        raise TypeError(f"question must be a string, got {type(question).__name__}")
    if not question.strip():
        raise ValueError(f"question is empty: {question!r}")
    return [
        *[dict(turn) for turn in copy.deepcopy(list(fewshot))],
        {"role": "user", "content": question + QUESTION_SUFFIX},
    ]


def example_answer(fewshot: Sequence[Mapping[str, str]] = FEWSHOT_PREFIX) -> str:
    """The worked answer of a few-shot prompt: its assistant turns, without the
    empty ``<think>`` block ("" for a zero-shot prompt).

    Example:
        >>> example_answer().split()[:4]
        ["Let's", 'spell', 'the', 'word']
        >>> example_answer([])
        ''
    """
    text = " ".join(m["content"] for m in fewshot if m.get("role") == "assistant")
    return re.sub(r"<think>.*?</think>", " ", text, flags=re.DOTALL)


def build_prompt(
    tokenizer: Any,
    question: str,
    fewshot: Sequence[Mapping[str, str]] = FEWSHOT_PREFIX,
) -> list[int]:
    """Render the chat for ``question`` and encode it as prompt token ids.

    Args:
        tokenizer: a Hugging Face-style tokenizer with ``apply_chat_template`` and
            ``encode`` (PyTRIO's ``get_tokenizer()`` and the local engine's both fit).
        question: a GSM8K question (non-empty).
        fewshot: the worked example (see :func:`build_messages`).

    Returns:
        ``prompt_tokens``: the token ids of the rendered chat, ending with the
        opening of the assistant turn the model will complete.

    Raises:
        ValueError: empty question, or the tokenizer produced no tokens.

    Introduced in: 01_gsm8k_dataset.ipynb
    """
    messages = build_messages(question, fewshot)
    prompt_text = tokenizer.apply_chat_template(
        messages,
        tokenize=False,
        add_generation_prompt=True,
        enable_thinking=False,
    )
    prompt_tokens = list(tokenizer.encode(prompt_text, add_special_tokens=False))
    if not prompt_tokens:
        raise ValueError(
            f"The tokenizer produced no prompt tokens for question {question!r}"
        )
    return prompt_tokens


def get_stop_sequences(tokenizer: Any) -> list[str]:
    """Stop strings for sampling: the end of the assistant turn.

    Args:
        tokenizer: any object with an ``eos_token`` attribute (may be None).

    Returns:
        ``eos_token`` and ``"<|im_end|>"``, without None, empty strings or
        duplicates, in that order.

    Introduced in: 01_gsm8k_dataset.ipynb

    Example:
        >>> class Tok:
        ...     eos_token = "<|im_end|>"
        >>> get_stop_sequences(Tok())
        ['<|im_end|>']
    """
    candidates = [getattr(tokenizer, "eos_token", None), "<|im_end|>"]
    return list(dict.fromkeys(token for token in candidates if token))
