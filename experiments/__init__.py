"""The paper's findings in miniature, one command each (docs/RESULTS.md, "How to reproduce"):

    python -m experiments.data_size     # §4.2-4.3, Fig. 3/4: which family wins depends on the amount of data
    python -m experiments.transfer      # §4.1, Tab. 2: Fashion-MNIST representations transferred to digits
    python -m experiments.vit_budget    # a ViT and the ResNet on the same 30-minute budget

Every training run goes through `vitkit train` / `vitkit finetune` (printed, so any run can be re-made alone)
into a run directory of its own; a finished run directory is reused and a stopped one resumed, so a command
that was interrupted continues where it stopped. Tables and figures are made from the run directories'
report.json and metrics.jsonl.
"""
