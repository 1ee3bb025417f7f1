"""Environments defined outside the package, named in a config as `data.env: examples.<module>:<Class>`
(docs/writing-an-environment.md). A regular package, so that `examples.*` resolves here from main.py's folder."""
