"""NatNet protocol, emulator and bridge."""
