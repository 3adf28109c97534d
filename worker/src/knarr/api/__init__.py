"""The public data model handlers work with."""
