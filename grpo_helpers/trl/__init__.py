"""The hand-off: a run of the series on Hugging Face TRL, and its trained weights out.

    mapping         every knob of ``GRPOConfig`` mapped onto TRL 1.16, or refused
    export          ``export trl``: the folder that trains the run with TRL
    export_readme   that folder's README (the launch commands and the mapping)
    train_grpo      the script the folder runs (copied, never imported here)
    export_peft     ``export peft``: a run's adapter as a PEFT folder, or merged
    export_checks   the exported weights' logprobs against the engine's
    export_card     the exported model's card
    export_paths    no path of the training machine in an exported file

It imports the core and the results wing (the card's held-out score), never the
classroom.
"""
