"""Guess my city: a 20-city game of yes/no questions, the worked example of a new task."""
