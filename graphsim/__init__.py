"""graphsim: predict LLM serving speed from the model's own code."""

__version__ = "0.1.0"
