"""Signal-processing operators."""
