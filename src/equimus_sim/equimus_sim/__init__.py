"""equimus_sim."""
