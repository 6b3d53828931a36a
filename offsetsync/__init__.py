"""Consumer-group offsets from the source to the target (docs/design.md §5, issue 7)."""
