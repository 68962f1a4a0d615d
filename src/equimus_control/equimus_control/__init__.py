"""equimus_control."""
