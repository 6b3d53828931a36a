"""Stage 1: source topics into staging envelopes, at-least-once and gap-free (docs/design.md §4,
invariants 1-3)."""
