"""Evaluation of an LM on its own: BLiMP, zero-shot ranking, the inputs of the analysis scripts."""
