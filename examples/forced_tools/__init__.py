"""Forced tool calls and a structured answer: an Agents SDK agent (env.py)."""
