"""The `exactly` command line: one command, a subcommand per role and tool (DESIGN.md §8)."""
