"""robot_description, /tf and /tf_static of the leg and the motion-capture bodies."""
