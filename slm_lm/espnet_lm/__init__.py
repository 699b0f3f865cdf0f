"""ESPnet integration: slm_lm LMs trained by ESPnet's trainer as ESPnet LM classes.

Importing this package does not import ESPnet; its submodules do (`task`, `lm` and the LM classes, `espnet_model`,
`registry`). Nothing is registered in ESPnet on import: see `registry.register_kinds`.
"""
