r"""Solutions to the exercises of 02_reward_design.ipynb.

tests/notebooks/test_01_04.py runs the notebook's self-check cells on these.
"""

BOX_OPEN = "\\boxed{"


def _closing_brace(text, start):
    """Index of the "}" that closes the brace opened just before ``start``, or -1."""
    depth = 1
    for index in range(start, len(text)):
        if text[index] == "{":
            depth += 1
        elif text[index] == "}":
            depth -= 1
            if depth == 0:
                return index
    return -1


def last_boxed(text):
    r"""Content of the last complete, non-empty \boxed{...} in text, or None.

    Try the boxes from the last one that starts to the first; return the first one
    whose braces close and whose content is not blank. (Quadratic in the worst case;
    ``rewards.extract_boxed`` does the same in one linear scan.)

    >>> last_boxed(r"\boxed{3} then \boxed{\frac{1}{2}}")
    '\\frac{1}{2}'
    >>> last_boxed(r"\boxed{3} then \boxed{4")
    '3'
    """
    start = text.rfind(BOX_OPEN)
    while start >= 0:
        content_start = start + len(BOX_OPEN)
        end = _closing_brace(text, content_start)
        if end >= 0 and text[content_start:end].strip():
            return text[content_start:end].strip()
        start = text.rfind(BOX_OPEN, 0, start)
    return None


#: A boxed near miss: shaped 0.45 * (1 - 2/72) + 0.10 = 0.5375, binary 0. (A bare
#: "72" would also earn 0.85 with binary 0, but it is right, just unboxed: a missing
#: box, not gaming; the exercise asks for a wrong answer.)
gaming_completion = r"\boxed{70}"


#: The grader's hidden tests: other inputs than the notebook's visible checks.
#: ``grpo_helpers.classroom.course`` computes the expected values with the solutions
#: above when it builds the student edition and writes them into the graded cells
#: as literals (nbgrader keeps them out of the student edition). ``forbid``: the
#: package functions the exercise says not to use; the hidden test makes them raise
#: while it calls the learner's function. This file never ships to students.
HIDDEN_CASES = {
    "last_boxed": {
        "cases": [
            (r"\boxed{5} and \boxed{6}",),
            (r"\boxed{\boxed{8}} end",),
            (r"x \boxed{ } \boxed{9}",),
            (r"\boxed{12",),
            ("no box here, 42",),
            (r"\boxed{a{b}c} then \boxed{d",),
            (r"\boxed{ 3.5 }\boxed{}",),
            (r"\boxed{-7} \boxed{\frac{3}{4}} \boxed{",),
            (r"{\boxed{1}}\boxed{2}}",),
            ("",),
        ],
        "forbid": [
            "grpo_helpers.rewards.extract_boxed",
            "grpo_helpers.rewards.read_answer",
        ],
    },
    # A value, not a function: the test judges it with a fresh copy of the rewards
    # module (loaded from its file), so patching grpo_helpers.rewards in the
    # notebook changes nothing.
    "gaming_completion": {
        "value": True,
        "cases": [()],
        "setup": """
def project(value, args):
    import importlib.util

    origin = importlib.util.find_spec("grpo_helpers.rewards").origin
    spec = importlib.util.spec_from_file_location("_grpo_fresh_rewards", origin)
    fresh = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fresh)
    if not isinstance(value, str):
        return f"not a string: {type(value).__name__}"
    text = str.__str__(value)
    return [
        len(text) <= 20,
        fresh.extract_boxed(text) is not None,
        "72" not in text,
        fresh.grade_answer(text, "72"),
        fresh.shaped_reward(text, "72") >= 0.5,
    ]
""",
    },
}
