"""The classroom: exercise checks, hidden tests, grading and the course site.

What a notebook's exercises and a teacher need, beside the core they teach:

    self_checks     an exercise's answer against cases or properties, with a hint
                    that never shows the wanted value
    against_engine  the learner's loss, GRPO step or concurrent calls run beside
                    the engine, which says whether they are right
    plain_step      notebook 04's GRPO step in plain PyTorch, against the engine's
    hidden_tests    the graded cells of the student edition and their judge
    course          the course site and the student edition (no solutions)
    grading         autograding handed-in notebooks with nbgrader
    grading_guard   what the grading process keeps around a learner's kernel
    sandbox         the sandbox each kernel that grades a submission runs in

It imports the core and the results wing (a check of notebook 07's exercises
compares with ``results.stats``), never the TRL wing.
"""
