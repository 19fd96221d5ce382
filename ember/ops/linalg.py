"""Linear-algebra operators."""
