"""Every recipe book the package ships, in one place: SWE-bench Verified's (data) and the
sample benchmark's (its tasks file). Here, not in ``recipes``, so that the recipe model
knows nothing of the sample, which builds on it."""

from __future__ import annotations

from swegreen.core.recipes import RecipeBook, verified_recipes
from swegreen.sample import sample_recipes


def builtin_recipes() -> RecipeBook:
    """The recipes shipped with the package: SWE-bench Verified's repos and the sample's."""
    return RecipeBook.merged([sample_recipes(), verified_recipes()])
