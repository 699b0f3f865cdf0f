"""Sentence scoring: the scorer interface, our scorer, the Hugging Face scorers, the score cache."""
