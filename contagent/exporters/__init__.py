"""Exporters: raw exchange logs -> results rows and training formats."""
