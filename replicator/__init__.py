"""Stage 1: source topics into staging envelopes, at-least-once and gap-free (DESIGN.md §4, 1-3)."""
