"""memnav: ROS 2 memory stack for embodied image-goal navigation."""

__version__ = "0.1.0"
