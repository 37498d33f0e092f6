"""Test helpers shared by the unit, integration and bench code (not tests themselves)."""
