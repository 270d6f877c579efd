"""Fruit quiz: a two-turn agent task whose second question depends on the first answer."""
