"""Goodput Operator: AI training and inference on accelerator clusters, goodput kept high."""

__version__ = "0.1.0"
