"""PURE: failure classification, quarantine decisions, storm guard, badput accounting."""
