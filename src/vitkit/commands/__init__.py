"""Sub-commands of the `vitkit` CLI: one module each, defining HELP, add_arguments(parser) and run(args) -> int.

Modules import their heavy dependencies inside `run`, so `vitkit --help` stays fast.
"""
