r"""Solutions to the exercises of 02_reward_design.ipynb.

tests/test_notebooks_01_04.py runs the notebook's self-check cells on these.
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
