"""VPPE valve DAC board protocol, emulator and driver."""
