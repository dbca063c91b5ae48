"""Readiness: the server's process and unit, its journal, HTTP probes, failure classes, the watchdog."""
