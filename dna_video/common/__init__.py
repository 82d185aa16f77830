"""Foundations every layer may use: nothing here imports from the rest of the package."""
