"""memnav: ROS 2 memory stack for embodied image-goal navigation (ament_python, also pip-installable)."""
from glob import glob

from setuptools import find_packages, setup

PACKAGE = "memnav"

setup(
    name=PACKAGE,
    version="0.1.0",
    packages=find_packages(include=["memnav", "memnav.*"]),
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        (f"share/{PACKAGE}/launch", glob("launch/*.launch.yaml")),
        (f"share/{PACKAGE}/config", glob("config/*.yaml") + glob("config/*.rviz") + glob("config/*.xml")),
        (f"share/{PACKAGE}/models", glob("models/*.pt") + glob("models/*.json")),
    ],
    package_data={PACKAGE: ["py.typed"]},
    install_requires=["numpy", "setuptools"],
    zip_safe=True,
    maintainer="memnav developers",
    maintainer_email="dev@memnav.local",
    description="Scene-graph long-term memory, working buffer and image-goal navigation for ROS 2",
    license="Apache-2.0",
    python_requires=">=3.11",
    entry_points={
        "console_scripts": [
            "memnav = memnav.cli:main",
            "sim_bridge_node = memnav.ros.sim_bridge_node:main",
            "replay_node = memnav.ros.replay_command:main_node",
            "policy_node = memnav.ros.policy_node:main",
            "encoder_node = memnav.ros.encoder_node:main",
            "memory_node = memnav.ros.memory_node:main",
            "stop_node = memnav.ros.stop_node:main",
            "stack_node = memnav.ros.stack_node:main",
            "safety_node = memnav.ros.safety_node:main",
        ],
    },
)
