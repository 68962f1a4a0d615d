"""equimus_bringup."""
