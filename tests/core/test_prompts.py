"""Tests of grpo_helpers.prompts (notebooks 01-02), with the real SmolLM2 tokenizer."""

from __future__ import annotations

import doctest
from typing import Any

import pytest

from grpo_helpers import prompts
from grpo_helpers.prompts import (
    FEWSHOT_PREFIX,
    QUESTION_SUFFIX,
    build_messages,
    build_prompt,
    get_stop_sequences,
)
from grpo_helpers.settings import SMOLLM2

#: SmolLM2's special token ids: <|endoftext|>, <|im_start|>, <|im_end|>.
ENDOFTEXT_ID, IM_START_ID, IM_END_ID = 0, 1, 2

#: The chat SmolLM2's template renders for NATALIA, written out by hand: its default
#: system turn, the few-shot turns, the question turn and the open assistant turn.
NATALIA = "Natalia sold clips to 48 of her friends. How many?"


NATALIA_PROMPT = (
    "<|im_start|>system\n"
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "<|im_start|>user\n"
    "How many r's are in strawberry? Provide a numerical answer without units, "
    "written inside \\boxed{}.<|im_end|>\n"
    "<|im_start|>assistant\n"
    "<think>\n\n</think>\n\n"
    "Let's spell the word out and number all the letters: "
    "1) s 2) t 3) r 4) a 5) w 6) b 7) e 8) r 9) r 10) y. "
    "We have r's at positions 3, 8, and 9. There are three r's. \\boxed{3}<|im_end|>\n"
    "<|im_start|>user\n"
    "Natalia sold clips to 48 of her friends. How many? Provide a numerical answer "
    "without units, written inside \\boxed{}.<|im_end|>\n"
    "<|im_start|>assistant\n"
)


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    """The local engine's SmolLM2 tokenizer; ``make setup`` installs it, so a
    failure to load it is a failure of the test, never a skip."""
    from grpo_helpers.local.models import load_tokenizer

    return load_tokenizer(SMOLLM2)


def test_doctests_pass() -> None:
    result = doctest.testmod(prompts)
    assert result.failed == 0 and result.attempted > 0


def test_constants_match_the_demo_scripts() -> None:
    assert QUESTION_SUFFIX == (
        " Provide a numerical answer without units, written inside \\boxed{}."
    )
    assert [m["role"] for m in FEWSHOT_PREFIX] == ["user", "assistant"]
    assert FEWSHOT_PREFIX[0]["content"] == (
        "How many r's are in strawberry? Provide a numerical answer without units, "
        "written inside \\boxed{}."
    )
    assert FEWSHOT_PREFIX[1]["content"] == (
        "<think>\n\n</think>\n\n"
        "Let's spell the word out and number all the letters: "
        "1) s 2) t 3) r 4) a 5) w 6) b 7) e 8) r 9) r 10) y. "
        "We have r's at positions 3, 8, and 9. "
        "There are three r's. \\boxed{3}"
    )


def test_build_messages() -> None:
    messages = build_messages("What is 2 + 3?")
    assert messages[:2] == FEWSHOT_PREFIX
    assert messages[2] == {
        "role": "user",
        "content": "What is 2 + 3?" + QUESTION_SUFFIX,
    }
    # the caller may edit the messages without touching the shared prefix
    messages[0]["content"] = "changed"
    assert FEWSHOT_PREFIX[0]["content"].startswith("How many r's")


@pytest.mark.parametrize("question", ["", "   ", "\n\t"])
def test_empty_question_is_rejected(question: str) -> None:
    with pytest.raises(ValueError, match="empty"):
        build_messages(question)


def test_non_string_question_is_rejected() -> None:
    with pytest.raises(TypeError):
        build_messages(None)  # type: ignore[arg-type]


class RecordingTokenizer:
    """Records how build_prompt calls the tokenizer; encodes one id per character."""

    eos_token = "</s>"

    def __init__(self, encoded: list[int] | None = None) -> None:
        self.encoded = encoded
        self.template_kwargs: dict[str, Any] = {}
        self.encode_kwargs: dict[str, Any] = {}

    def apply_chat_template(self, messages: list[dict[str, str]], **kwargs: Any) -> str:
        self.messages = messages
        self.template_kwargs = kwargs
        return "|".join(m["content"] for m in messages)

    def encode(self, text: str, **kwargs: Any) -> list[int]:
        self.encode_kwargs = kwargs
        return [ord(c) for c in text] if self.encoded is None else self.encoded


def test_build_prompt_calls_the_template_like_the_demo() -> None:
    fake = RecordingTokenizer()
    tokens = build_prompt(fake, "Q?")
    assert fake.template_kwargs == {
        "tokenize": False,
        "add_generation_prompt": True,
        "enable_thinking": False,
    }
    assert fake.encode_kwargs == {"add_special_tokens": False}
    assert [m["role"] for m in fake.messages] == ["user", "assistant", "user"]
    # the fake template joins the contents with "|"; build_prompt encodes that text
    rendered = "|".join(
        [
            "How many r's are in strawberry?" + QUESTION_SUFFIX,
            FEWSHOT_PREFIX[1]["content"],
            "Q? Provide a numerical answer without units, written inside \\boxed{}.",
        ]
    )
    assert tokens == [ord(c) for c in rendered]


def test_build_prompt_rejects_empty_tokens() -> None:
    with pytest.raises(ValueError, match="no prompt tokens"):
        build_prompt(RecordingTokenizer(encoded=[]), "Q?")


def test_build_prompt_rejects_empty_question() -> None:
    with pytest.raises(ValueError, match="empty"):
        build_prompt(RecordingTokenizer(), " ")


def test_build_prompt_with_smollm2(tokenizer: Any) -> None:
    tokens = build_prompt(tokenizer, "What is 2 + 3?")
    assert tokens and all(isinstance(t, int) for t in tokens)
    assert all(0 <= t < len(tokenizer) for t in tokens)
    text = tokenizer.decode(tokens)
    # the few-shot turn comes first, the question last, and the assistant turn is open
    assert text.index("How many r's are in strawberry?") < text.index("What is 2 + 3?")
    assert "<think>\n\n</think>\n\n" in text
    open_turn = "<|im_end|>\n<|im_start|>assistant\n"
    assert text.endswith("What is 2 + 3?" + QUESTION_SUFFIX + open_turn)
    # special tokens are not added twice: the template already wrote them
    assert tokens[0] == tokenizer.convert_tokens_to_ids("<|im_start|>")
    # system, few-shot user, few-shot assistant, question, open assistant turn
    assert text.count("<|im_start|>") == 5


def test_build_prompt_renders_the_smollm2_chat(tokenizer: Any) -> None:
    tokens = build_prompt(tokenizer, NATALIA)
    assert tokenizer.decode(tokens) == NATALIA_PROMPT
    # each turn marker is one special token, not its characters spelled out
    assert tokens[0] == IM_START_ID
    assert tokens.count(IM_START_ID) == NATALIA_PROMPT.count("<|im_start|>") == 5
    assert tokens.count(IM_END_ID) == NATALIA_PROMPT.count("<|im_end|>") == 4
    assert ENDOFTEXT_ID not in tokens  # nothing added around the template's text


def test_stop_sequences_with_smollm2(tokenizer: Any) -> None:
    assert get_stop_sequences(tokenizer) == ["<|im_end|>"]


@pytest.mark.parametrize(
    ("eos", "expected"),
    [
        ("</s>", ["</s>", "<|im_end|>"]),
        ("<|im_end|>", ["<|im_end|>"]),
        (None, ["<|im_end|>"]),
        ("", ["<|im_end|>"]),
    ],
)
def test_stop_sequences(eos: str | None, expected: list[str]) -> None:
    class Tok:
        eos_token = eos

    assert get_stop_sequences(Tok()) == expected


def test_stop_sequences_without_eos_attribute() -> None:
    assert get_stop_sequences(object()) == ["<|im_end|>"]
