"""equimus_hw."""
