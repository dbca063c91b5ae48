"""Releases: their paths and decisions, the release steps, the files a deploy puts in place."""
