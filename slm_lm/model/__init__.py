"""The models: configuration, the shared backbone, the five LM kinds, precision, tokenizers, the model directory."""
