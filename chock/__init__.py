"""Chock: a coding agent for the terminal whose session log is the single truth of a session."""

__version__ = "0.1.0"
