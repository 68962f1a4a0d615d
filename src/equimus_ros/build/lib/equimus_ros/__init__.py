"""rclpy plumbing shared by every equimus node (no physics here)."""
