"""A host: its facts, the host lock, port owners, disk space, model files, host programs, redaction."""
