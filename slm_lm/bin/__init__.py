"""Command-line entry points (`python -m slm_lm.bin.<name>` or the `slm-<name>` console scripts)."""
