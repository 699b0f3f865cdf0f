"""Data: the data sets and their download, corpus readers, LM text preparation, normalisation, decontamination."""
