"""Stacking plans whose stacks, row offsets and names are worked out by hand (issue 21)."""
