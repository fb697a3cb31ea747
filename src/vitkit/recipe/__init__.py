"""Recipes: a run's configuration as data (vitkit.recipe.run_config: RunConfig and its sections) and the one resolver
from a request (a recipe, settings, a run length, a resume) to the validated RunConfig, shared by the command line
and the Python API (vitkit.recipe.resolve). Below training and evaluation: both read recipes, neither is needed to
resolve one. The shipped TOML recipes are package data of vitkit.configs."""
