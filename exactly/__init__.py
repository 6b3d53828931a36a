"""The `exactly` command line: one command, a subcommand per role and tool (docs/design.md §8)."""
