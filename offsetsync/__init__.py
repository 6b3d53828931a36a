"""Consumer-group offsets from the source to the target (DESIGN.md §5, issue 7)."""
