"""Runnable agents and tasks for swarmrl (`python -m examples.demo`)."""
