"""Pure topology: the fleet model, gang placement, rank order, replacement, scale-down."""
