"""Publish stage: the Hub-ready dataset folder and its upload to the Hugging Face Hub."""
