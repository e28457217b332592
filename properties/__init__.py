"""The guarantees: pure checkers over histories."""
