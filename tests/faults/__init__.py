"""Fault injection for tests: a server launcher that patches the torch engine core, and its fixture."""
