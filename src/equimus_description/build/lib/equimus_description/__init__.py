"""The EquiMus leg described once (plain Python: no rclpy, no MuJoCo)."""
