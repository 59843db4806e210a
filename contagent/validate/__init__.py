"""Validation: prove from the raw logs that an export kept every rule."""
