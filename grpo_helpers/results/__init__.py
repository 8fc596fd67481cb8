"""Results: what a trained model and a set of runs say, measured and recorded.

Notebooks 07-09 import from here; the core (the loop the earlier notebooks teach)
never does. Modules, from a model's answers up to the cited numbers:

    evaluation     a sampler answers held-out questions; each answer is graded
    stats          Wilson intervals, McNemar's test, the paired bootstrap, pass@k
    report         an evaluation's records summarised; base against trained
    answers        the class of each graded answer (right boxed, bare guess, ...)
    heldout        notebooks 07 and 08's held-out comparison in one call
    recorded_runs  finished runs shipped with the series, plotted beside yours
    ablation       runs that differ in one knob, judged across seeds (notebook 09)
    replay         a recorded run's first steps again, and where they part
    facts          every number the prose cites, recomputed from the records

It imports the core, never the classroom or the TRL wing.
"""
