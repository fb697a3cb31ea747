"""Sub-commands of the `vitkit` CLI: one module each, defining HELP, add_arguments(parser) and run(args) -> int."""
