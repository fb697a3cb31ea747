"""The parser of each command (HELP, add_arguments), one module per command of vitkit.commands, importing no
torch: `vitkit <command> --help` answers as fast as `vitkit --help`."""
