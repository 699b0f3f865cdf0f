"""Readers of the corpora the recipe is built from: LibriSpeech on disk and the King James Bible of the mini corpus."""
