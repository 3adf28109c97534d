"""Moving to knarr from other frameworks: config translation, pure and table-driven."""
